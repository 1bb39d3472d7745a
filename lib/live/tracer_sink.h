// The tracer: a trace sink (lib/trace/trace_sink.h) that compresses the records its control
// selects and publishes them to its outputs (the server, the trace file, a forwarder to rank 0).
// Beside the step's records it derives one of its own: REPLAY's running scores, the sum of the
// per-step contributions dQ/dw so far.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "lib/live/compressor.h"
#include "lib/live/trace_control.h"
#include "lib/live/trace_event.h"
#include "lib/trace/trace_sink.h"

namespace magic {

// Who emits the records: the run, this rank and its place in the mesh.
struct TraceOrigin {
  std::string run;
  int64_t rank = 0;
  int64_t ranks = 1;
  std::vector<MeshDim> mesh;
  std::vector<int64_t> coords;
};

class TracerSink : public TraceSink {
 public:
  TracerSink(TraceOrigin origin, TraceControl control, std::shared_ptr<const ProjectionVectors> vectors = nullptr);

  // Outputs are attached before the run starts and outlive the sink's use.
  void add_output(TraceOutput* output) { outputs_.push_back(output); }

  void write(const TraceRecord& record, const at::Tensor& tensor) override;

  // Starts the next run of a process that makes several (magic-check: the clean run, then each
  // mutation's): its records carry `run`, and a record of it is sent even where an earlier run
  // made one of the same identity. The running scores start again.
  void begin_run(std::string run);

  // The training examples' ids, in order (magic-run): a score record sent with `top` names the
  // example of each entry it lists (its `id`), when the tensor's first dimension is the examples.
  void set_example_ids(std::vector<std::string> ids);

  // Replaces the control (any thread); the next record reads the new one.
  void set_control(TraceControl control);
  TraceControl control() const;

  // The greeting a new client receives.
  nlohmann::json hello() const;
  // Publishes {"type": "end"}: nothing is emitted after it.
  void finish(const std::string& status);
  // Publishes a message that is not a record (a control change) to every output, in order.
  void announce(nlohmann::json message);

  int64_t records() const { return seq_; }
  // Who emits the records; its run is the one begun last.
  TraceOrigin origin() const;

 private:
  void emit(const TraceRecord& record, const at::Tensor& tensor);
  void publish(const std::shared_ptr<const TraceEvent>& event);

  TraceOrigin origin_;  // its run changes under mutex_ (begin_run)
  const std::shared_ptr<const ProjectionVectors> vectors_;
  std::shared_ptr<const TraceControl> control_;  // read and replaced with std::atomic_load/store
  std::vector<TraceOutput*> outputs_;

  mutable std::mutex mutex_;  // the origin's run, the identities, the running scores, seq and the order of publishing
  std::set<std::string> identities_;
  at::Tensor running_scores_;
  std::vector<std::string> example_ids_;
  std::atomic<int64_t> seq_{0};
  bool finished_ = false;
};

// The record message of docs/tracer.md (without seq).
nlohmann::json record_message(const TraceOrigin& origin, const TraceRecord& record, const at::Tensor& tensor,
                              const TraceRule& rule, nlohmann::json data);

}  // namespace magic
