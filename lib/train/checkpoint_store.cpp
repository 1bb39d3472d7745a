#include "lib/train/checkpoint_store.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "lib/core/error.h"
#include "lib/core/run_device.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"
#include "lib/io/sealed_file.h"

namespace magic {

CheckpointStore::CheckpointStore(std::vector<int64_t> steps, std::optional<std::string> spill_dir)
    : steps_(std::move(steps)) {
  if (!spill_dir) return;
  std::error_code ec;
  std::filesystem::create_directories(*spill_dir, ec);
  std::string pattern = (std::filesystem::path(*spill_dir) / "magic-checkpoints-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw InputError(str_cat("checkpoint spill directory ", *spill_dir, ": cannot create a folder there"));
  }
  directory_ = pattern;
  owns_directory_ = true;
}

CheckpointStore CheckpointStore::persistent(std::vector<int64_t> steps, const std::string& folder) {
  CheckpointStore store;
  store.steps_ = std::move(steps);
  store.directory_ = folder;
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (!std::filesystem::is_directory(folder)) {
    throw InputError(str_cat("checkpoint folder ", folder, ": cannot create it"));
  }
  // Files are written whole (a temporary name, then a rename), but a file read back is input like
  // any other: each one present is verified (seal and checksum) before the run takes it as saved.
  for (int64_t step : store.steps_) {
    const std::string path = store.path_for(step);
    if (!std::filesystem::exists(path)) continue;
    store.load_file(step);
    store.saved_[step] = true;
    store.bytes_ += static_cast<int64_t>(std::filesystem::file_size(path));
  }
  return store;
}

CheckpointStore::CheckpointStore(CheckpointStore&& other) noexcept
    : steps_(std::move(other.steps_)),
      directory_(std::move(other.directory_)),
      owns_directory_(other.owns_directory_),
      memory_(std::move(other.memory_)),
      saved_(std::move(other.saved_)),
      device_(other.device_),
      bytes_(other.bytes_),
      segment_slots_(other.segment_slots_) {
  other.directory_.clear();
  other.owns_directory_ = false;
}

CheckpointStore::~CheckpointStore() {
  if (!owns_directory_) return;
  std::error_code ec;
  std::filesystem::remove_all(directory_, ec);
}

bool CheckpointStore::wants(int64_t step) const {
  return std::binary_search(steps_.begin(), steps_.end(), step);
}

std::string CheckpointStore::path_for(int64_t step) const {
  return (std::filesystem::path(directory_) / str_cat("step-", step, ".safetensors")).string();
}

void CheckpointStore::save(int64_t step, const TrainState& state) {
  if (saved_.count(step) && !directory_.empty() && !owns_directory_) return;
  if (saved_.count(step)) throw std::logic_error(str_cat("checkpoint ", step, " saved twice"));
  saved_[step] = true;
  bytes_ += state_bytes(state);
  if (directory_.empty()) {
    memory_.emplace(step, TrainState{state.params.clone(), state.opt.clone(), state.persistent.clone()});
  } else {
    save_sealed(path_for(step), flatten_state(state), seal_for(step));
  }
}

std::string CheckpointStore::seal_for(int64_t step) const {
  return str_cat(folder_seal(directory_), " checkpoint ", step);
}

TrainState CheckpointStore::load_file(int64_t step) const {
  const TrainState read =
      unflatten_state(load_sealed(path_for(step), seal_for(step), str_cat("the checkpoint of step ", step)));
  return TrainState{to_device(read.params, device_), to_device(read.opt, device_), to_device(read.persistent, device_)};
}

TrainState CheckpointStore::load(int64_t step) const {
  if (!saved_.count(step)) throw std::logic_error(str_cat("no checkpoint at step ", step));
  if (directory_.empty()) return memory_.at(step);
  return load_file(step);
}

int64_t CheckpointStore::nearest_at_or_before(int64_t step) const {
  auto it = std::upper_bound(steps_.begin(), steps_.end(), step);
  if (it == steps_.begin()) throw std::logic_error(str_cat("no checkpoint at or before step ", step));
  return *std::prev(it);
}

}  // namespace magic
