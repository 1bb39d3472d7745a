// Where the running code stands in the run, for trace points that cannot know it themselves: the
// model's blocks are called by the training step, the query and REPLAY alike. The step that calls
// them sets the context for its thread; trace points that read it record only while it is active.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lib/trace/trace_record.h"

namespace magic {

struct TraceContext {
  bool active = false;
  int64_t step = -1;
  std::string order = "forward";
  // The placements of this rank's [rows, columns, ...] activations; empty in a single process.
  std::vector<Placement> activation_placements;
  // The micro-batch of the step the forward records belong to; -1: the whole step.
  int64_t micro_batch = -1;
  // A whole batch recorded as a run that accumulates over micro-batches records it
  // (docs/dump-format.md, `micro_batch`): activation k holds rows micro_batch_rows[k] of each
  // forward record, as micro-batch k. Empty: the records are whole.
  std::vector<at::Tensor> micro_batch_rows;
};

const TraceContext& trace_context();

// Sets this thread's context for the scope's lifetime, then restores the one before.
class ScopedTraceContext {
 public:
  explicit ScopedTraceContext(TraceContext context);
  ~ScopedTraceContext();
  ScopedTraceContext(const ScopedTraceContext&) = delete;
  ScopedTraceContext& operator=(const ScopedTraceContext&) = delete;

 private:
  TraceContext previous_;
};

// A forward record of the context's step and micro-batch ("blocks.1", "logits"), placed as its
// activations are, or as `placements` says; one per micro-batch where the context cuts the batch
// into micro-batches' rows. Nothing unless a sink listens and the context is active.
void trace_activation(const at::Tensor& value, const std::string& name, const std::string& kind,
                      const std::string& layer);
void trace_activation(const at::Tensor& value, const std::string& name, const std::string& kind,
                      const std::string& layer, const std::vector<Placement>& placements);

// A layer's attention probabilities [batch, heads, queries, keys] in the context's step: kind
// "attention", for the tracer's compressors only (a dump leaves them out: docs/dump-format.md).
void trace_attention(const at::Tensor& probabilities, const std::string& layer);

}  // namespace magic
