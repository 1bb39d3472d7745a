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
  int64_t seq = -1;     // a record's
  at::Tensor tensor;    // a detached CPU copy when the record's compressor is `none`; else undefined

  static std::shared_ptr<const TraceEvent> make(nlohmann::json message, at::Tensor tensor = {});
};

// Where events go: the WebSocket server, the trace file, a forwarder to rank 0. publish() is
// called on the run's threads and must not block on a client.
class TraceOutput {
 public:
  virtual ~TraceOutput() = default;
  virtual void publish(const std::shared_ptr<const TraceEvent>& event) = 0;
};

}  // namespace magic
