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
  nlohmann::json message;
  std::string text;     // message, serialized once for every client
  bool record = false;  // a "record" message (counted by seq and by drop counts)
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
