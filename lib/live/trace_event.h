// What the tracer emits: one message of the stream (docs/tracer.md, "Messages") and, for a record
// kept whole, the tensor itself for the file output. Shared, immutable once made: every output
// and client reads the same event.
#pragma once

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace magic {

struct TraceEvent {
  // The message, serialized once for every client. Only the text is kept: a queue of parsed JSON
  // would hold many times the bytes it counts.
  std::string text;
  bool record = false;  // a "record" message (counted by seq and by drop counts)
  bool end = false;     // the "end" message: a client that comes after it still gets it
  int64_t seq = -1;     // a record's
  std::string series;   // a record's series_key: what the server's history keeps it under
  at::Tensor tensor;    // a detached CPU copy when the record's compressor is `none`; else undefined

  static std::shared_ptr<const TraceEvent> make(nlohmann::json message, at::Tensor tensor = {});
};

// The series of a record message: its run, rank, kind, phase, order, layer, name and compressor,
// and whether it has a step (the final scores are not one more point of the per-step ones).
std::string series_key(const nlohmann::json& record);

// Where events go: the WebSocket server, the trace file, a forwarder to rank 0. publish() is
// called on the run's threads and must not block on a client.
class TraceOutput {
 public:
  virtual ~TraceOutput() = default;
  virtual void publish(const std::shared_ptr<const TraceEvent>& event) = 0;
};

}  // namespace magic
