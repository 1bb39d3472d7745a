// Trace points and the sink they write to. The pipeline calls trace_point() where a named tensor
// is made; with no sink attached that is one relaxed atomic load and a branch (the record is not
// even built: docs/benchmarks.md, "Trace points"). A sink copies what it keeps and never changes
// the tensor or its graph, so attaching one changes no value a run computes.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lib/core/tensor_tree.h"
#include "lib/trace/trace_layout.h"
#include "lib/trace/trace_record.h"

namespace magic {

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // May be called from more than one thread (pipelined REPLAY); a sink serializes itself.
  virtual void write(const TraceRecord& record, const at::Tensor& tensor) = 0;
};

// Several sinks behind one trace point (--dump and the tracer at once): each record to each, in order.
class TeeSink : public TraceSink {
 public:
  explicit TeeSink(std::vector<TraceSink*> sinks) : sinks_(std::move(sinks)) {}
  void write(const TraceRecord& record, const at::Tensor& tensor) override {
    for (TraceSink* s : sinks_) s->write(record, tensor);
  }

 private:
  std::vector<TraceSink*> sinks_;
};

namespace trace_detail {
extern std::atomic<TraceSink*> active_sink;
}  // namespace trace_detail

inline bool tracing() {
  return trace_detail::active_sink.load(std::memory_order_relaxed) != nullptr;
}

// `make_record()` builds the record only when a sink listens.
template <typename MakeRecord>
inline void trace_point(const at::Tensor& tensor, MakeRecord&& make_record) {
  if (TraceSink* sink = trace_detail::active_sink.load(std::memory_order_acquire)) sink->write(make_record(), tensor);
}

// One record per entry of `tree`, each like `like` but named after its entry (plus `suffix`), in
// the record order of docs/dump-format.md: gradients as backward makes them, the last entry first;
// every other kind in the tree's order.
void write_tree(TraceSink& sink, const TensorTree& tree, const TraceRecord& like, const std::string& suffix = "");

// write_tree() to the listening sink, if one listens.
void trace_tree(const TensorTree& tree, const TraceRecord& like, const std::string& suffix = "");

// trace_tree() of a tree shaped like the parameters (a gradient, an update, a cotangent, an HVP):
// each entry placed as `layout` places the parameter of its name; `like`'s placements are unused.
void trace_parameter_tree(const TensorTree& tree, const TraceRecord& like, const TraceLayout& layout);

// Attaches `sink` to the process for the scope's lifetime, then restores the one before.
class ScopedTraceSink {
 public:
  explicit ScopedTraceSink(TraceSink* sink);
  ~ScopedTraceSink();
  ScopedTraceSink(const ScopedTraceSink&) = delete;
  ScopedTraceSink& operator=(const ScopedTraceSink&) = delete;

 private:
  TraceSink* previous_;
};

// Adds `sink` beside the one already listening (if any) for the scope's lifetime: both get every
// record, the one before first. magic-check's first-divergence recorder and the live tracer.
class ScopedAddedTraceSink {
 public:
  explicit ScopedAddedTraceSink(TraceSink* sink);
  ScopedAddedTraceSink(const ScopedAddedTraceSink&) = delete;
  ScopedAddedTraceSink& operator=(const ScopedAddedTraceSink&) = delete;

 private:
  TeeSink tee_;
  ScopedTraceSink listening_;
};

// Holds the records made while it listens and, on flush(), writes them to the sink that listened
// before it, micro-batch by micro-batch (each one's in the order made). A run that accumulates
// gradients makes micro-batch 0's forward records, then micro-batch 1's; a single process that
// cuts its whole batch's records into micro-batches' rows (TraceContext::micro_batch_rows) makes
// them trace point by trace point. Attach it only while a sink listens.
class MicroBatchOrder : public TraceSink {
 public:
  MicroBatchOrder();
  void write(const TraceRecord& record, const at::Tensor& tensor) override;
  void flush();

 private:
  TraceSink* next_;
  std::mutex mutex_;
  std::vector<std::pair<TraceRecord, at::Tensor>> held_;
  ScopedTraceSink listening_;
};

}  // namespace magic
