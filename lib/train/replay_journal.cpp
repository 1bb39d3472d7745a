#include "lib/train/replay_journal.h"

#include <filesystem>
#include <stdexcept>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/sealed_file.h"

namespace magic {
namespace {

constexpr const char* kPrefix = "replay-";

// The number in "replay-<n>.safetensors", or -1.
int64_t number_in(const std::string& name) {
  const std::string prefix = kPrefix, suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

// Query j's entries in a record: "q<j>.dw" and its λ's flattened state ("q<j>.params.…").
std::string query_prefix(size_t j) {
  return str_cat("q", j, ".");
}

}  // namespace

ReplayJournal::ReplayJournal(std::string folder, int64_t segments, int64_t queries)
    : folder_(std::move(folder)), segments_(segments), queries_(queries) {
  if (segments_ < 1 || queries_ < 1) throw std::logic_error("a REPLAY journal needs a segment and a query");
}

std::string ReplayJournal::path(int64_t progress) const {
  return (std::filesystem::path(folder_) / str_cat(kPrefix, progress, ".safetensors")).string();
}

int64_t ReplayJournal::latest() const {
  int64_t best = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder_, ec)) {
    best = std::max(best, number_in(entry.path().filename().string()));
  }
  return best;
}

std::string ReplayJournal::seal_for(int64_t progress) const {
  return str_cat(folder_seal(folder_), " record ", progress);
}

ReplayResume ReplayJournal::resume(int64_t progress) const {
  const std::string where = str_cat("the REPLAY journal's record ", progress);
  if (progress < 1 || progress > segments_) {
    throw InputError(str_cat(path(progress), ": ", where, " is beyond the run's ", segments_, " segments"));
  }
  const TensorTree t = load_sealed(path(progress), seal_for(progress), where);
  ReplayResume r;
  r.segments_done = progress;
  for (int64_t j = 0; j < queries_; ++j) {
    const std::string prefix = query_prefix(static_cast<size_t>(j));
    if (!t.contains(prefix + "dw")) {
      throw InputError(
          str_cat(path(progress), ": ", where, " has no ", prefix, "dw (query ", j, " of ", queries_, ")"));
    }
    r.dws.push_back(t.at(prefix + "dw"));
    r.lambdas.push_back(unflatten_state(t.strip_prefix(prefix)));
  }
  return r;
}

void ReplayJournal::record(const ReplayResume& after) const {
  if (static_cast<int64_t>(after.dws.size()) != queries_ || after.lambdas.size() != after.dws.size()) {
    throw std::logic_error(str_cat("REPLAY journal: ", after.dws.size(), " queries recorded, ", queries_, " expected"));
  }
  TensorTree t;
  for (size_t j = 0; j < after.dws.size(); ++j) {
    const std::string prefix = query_prefix(j);
    t = merge(t, flatten_state(after.lambdas[j]).with_prefix(prefix));
    t.insert(prefix + "dw", after.dws[j]);
  }
  save_sealed(path(after.segments_done), t, seal_for(after.segments_done));
  prune_before(after.segments_done);
}

void ReplayJournal::prune_before(int64_t progress) const {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder_, ec)) {
    const int64_t p = number_in(entry.path().filename().string());
    if (p >= 0 && p < progress - 1) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace magic
