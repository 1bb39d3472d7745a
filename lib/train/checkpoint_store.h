// Saved training states for REPLAY, held in memory or spilled to disk (one safetensors file per
// checkpoint, in a private directory removed when the store is destroyed).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/train/checkpoint_schedule.h"
#include "lib/train/train_state.h"

namespace magic {

class CheckpointStore {
 public:
  // `spill_dir`: a directory under which a private folder is made; nullopt keeps memory.
  CheckpointStore(std::vector<int64_t> steps, std::optional<std::string> spill_dir = std::nullopt);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  const std::vector<int64_t>& steps() const { return steps_; }
  bool wants(int64_t step) const;
  void save(int64_t step, const TrainState& state);
  TrainState load(int64_t step) const;
  // The greatest checkpointed step <= `step`.
  int64_t nearest_at_or_before(int64_t step) const;

  int64_t count() const { return static_cast<int64_t>(saved_.size()); }
  int64_t bytes() const { return bytes_; }  // in memory or on disk
  bool spilled() const { return !directory_.empty(); }

 private:
  std::string path_for(int64_t step) const;

  std::vector<int64_t> steps_;
  std::string directory_;
  std::map<int64_t, TrainState> memory_;
  std::map<int64_t, bool> saved_;
  int64_t bytes_ = 0;
};

}  // namespace magic
