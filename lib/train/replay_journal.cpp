#include "lib/train/replay_journal.h"

#include <filesystem>
#include <stdexcept>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/sealed_file.h"

namespace magic {
namespace {

constexpr const char* kPartialPrefix = "replay-";
constexpr const char* kQueryPrefix = "query-";

// The number in "<prefix><n>.safetensors", or -1.
int64_t number_in(const std::string& name, const std::string& prefix) {
  const std::string suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

}  // namespace

ReplayJournal::ReplayJournal(std::string folder, int64_t segments) : folder_(std::move(folder)), segments_(segments) {
  if (segments_ < 1) throw std::logic_error("a REPLAY journal needs at least one segment");
}

std::string ReplayJournal::partial_path(int64_t progress) const {
  return (std::filesystem::path(folder_) / str_cat(kPartialPrefix, progress, ".safetensors")).string();
}

std::string ReplayJournal::query_path(int64_t query) const {
  return (std::filesystem::path(folder_) / str_cat(kQueryPrefix, query, ".safetensors")).string();
}

int64_t ReplayJournal::latest() const {
  int64_t best = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder_, ec)) {
    const std::string name = entry.path().filename().string();
    const int64_t p = number_in(name, kPartialPrefix);
    if (p >= 0) best = std::max(best, p);
    const int64_t j = number_in(name, kQueryPrefix);
    if (j >= 0) best = std::max(best, (j + 1) * segments_);
  }
  return best;
}

std::string ReplayJournal::seal_for(const std::string& record) const {
  return str_cat(folder_seal(folder_), " ", record);
}

at::Tensor ReplayJournal::load_record(const std::string& path, const std::string& record, TensorTree* rest) const {
  TensorTree t = load_sealed(path, seal_for(record), "the REPLAY journal's " + record);
  if (!t.contains("dw")) throw InputError(str_cat(path, ": the REPLAY journal's ", record, " has no dw"));
  if (rest != nullptr) {
    for (const auto& e : t) {
      if (e.name != "dw") rest->insert(e.name, e.tensor);
    }
  }
  return t.at("dw");
}

ReplayResume ReplayJournal::partial(int64_t progress) const {
  TensorTree lambda;
  const at::Tensor dw = load_record(partial_path(progress), str_cat("record ", progress), &lambda);
  return ReplayResume{progress % segments_, unflatten_state(lambda), dw};
}

at::Tensor ReplayJournal::finished_query(int64_t query) const {
  return load_record(query_path(query), str_cat("query ", query), nullptr);
}

void ReplayJournal::record_partial(int64_t progress, const TrainState& lambda, const at::Tensor& dw) const {
  TensorTree t = flatten_state(lambda);
  t.insert("dw", dw);
  save_sealed(partial_path(progress), t, seal_for(str_cat("record ", progress)));
  prune_before(progress);
}

void ReplayJournal::record_finished_query(int64_t query, const at::Tensor& dw) const {
  TensorTree t;
  t.insert("dw", dw);
  save_sealed(query_path(query), t, seal_for(str_cat("query ", query)));
  prune_before((query + 1) * segments_);
}

void ReplayJournal::prune_before(int64_t progress) const {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder_, ec)) {
    const int64_t p = number_in(entry.path().filename().string(), kPartialPrefix);
    if (p >= 0 && p < progress - 1) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace magic
