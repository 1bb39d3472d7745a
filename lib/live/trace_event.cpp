#include "lib/live/trace_event.h"

namespace magic {

std::shared_ptr<const TraceEvent> TraceEvent::make(nlohmann::json message, at::Tensor tensor) {
  auto e = std::make_shared<TraceEvent>();
  e->record = message.value("type", "") == "record";
  e->end = message.value("type", "") == "end";
  if (e->record) {
    e->seq = message.value("seq", int64_t{-1});
    e->series = series_key(message);
  }
  // Invalid UTF-8 in a name is replaced, never a throw on the run's thread.
  e->text = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  e->tensor = std::move(tensor);
  return e;
}

std::string series_key(const nlohmann::json& record) {
  std::string key;
  const auto field = [&](const char* name) {
    const auto it = record.find(name);
    key += it == record.end() ? std::string() : it->is_string() ? it->get<std::string>() : it->dump();
    key += '\x1f';  // a separator no name holds (unit separator)
  };
  for (const char* name : {"run", "rank", "kind", "phase", "order", "layer", "name", "micro_batch", "compressor"})
    field(name);
  const auto step = record.find("step");
  key += step != record.end() && step->is_number_integer() && step->get<int64_t>() < 0 ? "final" : "step";
  return key;
}

}  // namespace magic
