#include "lib/live/trace_event.h"

namespace magic {

std::shared_ptr<const TraceEvent> TraceEvent::make(nlohmann::json message, at::Tensor tensor) {
  auto e = std::make_shared<TraceEvent>();
  e->record = message.value("type", "") == "record";
  if (e->record) e->seq = message.value("seq", int64_t{-1});
  // Invalid UTF-8 in a name is replaced, never a throw on the run's thread.
  e->text = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  e->tensor = std::move(tensor);
  return e;
}

}  // namespace magic
