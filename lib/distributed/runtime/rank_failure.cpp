#include "lib/distributed/runtime/rank_failure.h"

#include <nlohmann/json.hpp>

#include <chrono>

#include "lib/core/stop_signal.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"

namespace magic::dist {
namespace {

// The words the tools print (check_main, run_main) for each kind of exception.
std::string kind_of(const std::exception& e) {
  if (dynamic_cast<const InputError*>(&e) != nullptr) return "error";
  if (dynamic_cast<const StopRequested*>(&e) != nullptr) return "interrupted";
  if (dynamic_cast<const DistributedError*>(&e) != nullptr) return "distributed failure";
  return "failed";
}

std::string what_of(const RankFailure& f) {
  return str_cat(f.own ? "failed with its own error" : "failed", " in phase '", f.phase.empty() ? "unknown" : f.phase,
                 "'", f.waiting.empty() ? "" : " while waiting in " + f.waiting, ": ", f.kind, ": ", f.message);
}

}  // namespace

RankFailure describe_failure(const std::exception& e, int rank) {
  RankFailure f;
  f.rank = rank;
  f.kind = kind_of(e);
  f.phase = current_phase();
  f.waiting = current_waiting();
  f.own = f.waiting.empty() && f.kind != "distributed failure";
  f.message = one_line_error(e);
  f.time_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
  return f;
}

bool fails_the_check(const RankFailure& f) {
  return f.rank >= 0 && f.own && (f.kind == "failed" || f.kind == "crashed");
}

const RankFailure* first_own_failure(const std::vector<RankFailure>& failures) {
  const RankFailure* first = nullptr;
  for (const auto& f : failures) {
    if (f.own && f.rank >= 0 && (first == nullptr || f.time_us < first->time_us)) first = &f;
  }
  return first;
}

std::string failure_key(int rank) {
  return str_cat("magic/failure/", rank);
}

void write_failure(c10d::Store& store, const RankFailure& f) {
  const std::string value =
      nlohmann::json{{"rank", f.rank},       {"own", f.own},         {"kind", f.kind},      {"phase", f.phase},
                     {"waiting", f.waiting}, {"message", f.message}, {"time_us", f.time_us}}
          .dump();
  store.set(failure_key(f.rank), std::vector<uint8_t>(value.begin(), value.end()));
}

std::optional<RankFailure> read_failure(c10d::Store& store, int rank) {
  const std::string key = failure_key(rank);
  if (!store.check({key})) return std::nullopt;
  const std::vector<uint8_t> bytes = store.get(key);
  const auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  RankFailure f;
  f.rank = j.value("rank", -1);
  f.own = j.value("own", false);
  f.kind = j.value("kind", "");
  f.phase = j.value("phase", "");
  f.waiting = j.value("waiting", "");
  f.message = j.value("message", "");
  f.time_us = j.value("time_us", int64_t{0});
  if (f.rank != rank) return std::nullopt;  // not a record this rank made
  return f;
}

RankFailed::RankFailed(RankFailure cause, std::vector<RankFailure> all, int world_size)
    : DistributedError(str_cat("rank ", cause.rank, " of ", world_size, " (thread) ", what_of(cause))),
      cause_(std::move(cause)),
      all_(std::move(all)),
      world_size_(world_size) {}

}  // namespace magic::dist
