#include "lib/live/stream_check.h"

namespace magic {

bool StreamCheck::take(const nlohmann::json& m) {
  const std::string type = m.value("type", "");
  const auto fail = [&](const std::string& what) {
    if (error.empty()) error = what;
  };
  if (type == "dropped") {
    dropped += m.at("count").get<int64_t>();
    pending_drops += m.at("count").get<int64_t>();
    if (m.at("total").get<int64_t>() != dropped) fail("a drop notice's total is not the sum of its counts");
  } else if (type == "history") {
    history_left = m.at("records").get<int64_t>();
    if (records > 0 || history > 0) fail("a history after the stream began");
  } else if (type == "record" && history_left > 0) {
    --history_left;
    ++history;
  } else if (type == "record") {
    const int64_t rank = m.at("rank").get<int64_t>(), seq = m.at("seq").get<int64_t>();
    // A record follows its rank's previous one, or the records dropped since account for the gap
    // (one rank: exactly; several: the notices count every rank's records, so at most).
    const auto it = next_seq.find(rank);
    if (it != next_seq.end()) {
      const int64_t gap = seq - it->second;
      const bool one_rank = next_seq.size() == 1;
      if (gap < 0 || (one_rank && gap != pending_drops) || (!one_rank && gap > pending_drops)) {
        fail("rank " + std::to_string(rank) + ": seq " + std::to_string(seq) + " after " +
             std::to_string(it->second - 1) + " with " + std::to_string(pending_drops) + " dropped between");
      }
      if (one_rank) pending_drops = 0;
    }
    next_seq[rank] = seq + 1;
    ++records;
    ++by_kind[m.at("kind").get<std::string>()];
  } else if (type == "end") {
    end_records = m.at("records").get<int64_t>();
    // Rank 0's count: its last record and the drops after it make it up.
    if (next_seq.count(0) && next_seq.size() == 1 && next_seq[0] + pending_drops != end_records) {
      fail("end says " + std::to_string(end_records) + " records; the stream accounts for " +
           std::to_string(next_seq[0] + pending_drops));
    }
    return false;
  }
  return true;
}

StreamCheck read_stream(TraceClient& client, std::chrono::seconds idle) {
  StreamCheck check;
  for (;;) {
    const std::optional<std::string> text = client.read(idle);
    if (!text) {
      if (check.error.empty()) check.error = "the stream stopped before its end message";
      return check;
    }
    if (!check.take(nlohmann::json::parse(*text))) return check;
  }
}

}  // namespace magic
