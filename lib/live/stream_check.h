// What a client of the tracer can check of the stream it receives (docs/tracer.md, "Messages"):
// each rank's records come in order, every gap is accounted for by a drop notice, and the end
// message's count is met. The tests, the load bench and any client that wants to know use it.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>

#include "lib/live/trace_client.h"

namespace magic {

struct StreamCheck {
  std::map<int64_t, int64_t> next_seq;  // by rank: the seq the next record must have
  std::map<std::string, int64_t> by_kind;
  int64_t records = 0, dropped = 0, pending_drops = 0, end_records = -1;
  // A late client's history (docs/tracer.md, "History"): records sent before it came,
  // downsampled, so their seq has gaps no notice counts; checked from the first live record on.
  int64_t history = 0, history_left = 0;
  std::string error;  // the first violation, or ""

  // One message; returns false once the stream ended (the "end" message).
  bool take(const nlohmann::json& m);
};

// Reads `client` until the end message or nothing for `idle`; the check of what came.
StreamCheck read_stream(TraceClient& client, std::chrono::seconds idle = std::chrono::seconds(60));

}  // namespace magic
