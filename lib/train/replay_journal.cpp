#include "lib/train/replay_journal.h"

#include <filesystem>
#include <stdexcept>

#include "lib/core/strings.h"
#include "lib/io/safetensors.h"

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

ReplayResume ReplayJournal::partial(int64_t progress) const {
  const TensorTree t = load_safetensors(partial_path(progress)).tensors;
  TensorTree lambda;
  for (const auto& e : t) {
    if (e.name != "dw") lambda.insert(e.name, e.tensor);
  }
  return ReplayResume{progress % segments_, unflatten_state(lambda), t.at("dw")};
}

at::Tensor ReplayJournal::finished_query(int64_t query) const {
  return load_safetensors(query_path(query)).tensors.at("dw");
}

void ReplayJournal::record_partial(int64_t progress, const TrainState& lambda, const at::Tensor& dw) const {
  TensorTree t = flatten_state(lambda);
  t.insert("dw", dw);
  save_safetensors(partial_path(progress), t);
  prune_before(progress);
}

void ReplayJournal::record_finished_query(int64_t query, const at::Tensor& dw) const {
  TensorTree t;
  t.insert("dw", dw);
  save_safetensors(query_path(query), t);
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
