// Saved training states for REPLAY: held in memory, spilled to disk (one safetensors file per
// checkpoint, in a private folder removed when the store is destroyed), or kept in a run's own
// folder that outlives the process (run_folder.h), so that an interrupted run can resume.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/step/train_state.h"
#include "lib/train/checkpoint_schedule.h"

namespace magic {

class CheckpointStore {
 public:
  // `spill_dir`: a directory under which a private folder is made; nullopt keeps memory.
  CheckpointStore(std::vector<int64_t> steps, std::optional<std::string> spill_dir = std::nullopt);
  // Checkpoints in `folder` itself, kept when the store is destroyed; the ones already there
  // (written by an interrupted run of the same configuration) count as saved once each is
  // verified: a damaged or foreign file is an InputError naming it and its step (exit 2).
  static CheckpointStore persistent(std::vector<int64_t> steps, const std::string& folder);
  ~CheckpointStore();
  CheckpointStore(CheckpointStore&& other) noexcept;
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // Checkpoints read back from files go to `device`, the run's (run_device.h); the host by default.
  void place_loaded_on(const at::Device& device) { device_ = device; }

  const std::vector<int64_t>& steps() const { return steps_; }
  bool wants(int64_t step) const;
  bool has(int64_t step) const { return saved_.count(step) > 0; }
  // A persistent store skips a checkpoint it already holds: the resumed run recomputes the same state.
  void save(int64_t step, const TrainState& state);
  TrainState load(int64_t step) const;
  // The greatest checkpointed step <= `step`.
  int64_t nearest_at_or_before(int64_t step) const;
  // The greatest step saved so far, -1 when none.
  int64_t latest_saved() const { return saved_.empty() ? -1 : saved_.rbegin()->first; }

  int64_t count() const { return static_cast<int64_t>(saved_.size()); }
  int64_t states_in_memory() const { return spilled() ? 0 : count(); }
  // The states REPLAY may hold for a segment beside its first and a working state (a memory
  // budget's plan: binomial_checkpointing.h); unbounded by default, a segment recomputed whole.
  static constexpr int64_t kUnboundedSlots = int64_t{1} << 60;
  int64_t segment_slots() const { return segment_slots_; }
  void set_segment_slots(int64_t slots) { segment_slots_ = slots; }
  bool budgeted() const { return segment_slots_ < kUnboundedSlots; }
  int64_t bytes() const { return bytes_; }  // in memory or on disk
  bool spilled() const { return !directory_.empty(); }

 private:
  CheckpointStore() = default;
  std::string path_for(int64_t step) const;
  std::string seal_for(int64_t step) const;
  // The checkpoint file of `step`, verified (sealed_file.h): InputError naming it otherwise.
  TrainState load_file(int64_t step) const;

  std::vector<int64_t> steps_;
  std::string directory_;
  bool owns_directory_ = false;  // a private folder, removed with the store
  std::map<int64_t, TrainState> memory_;
  std::map<int64_t, bool> saved_;
  at::Device device_ = at::Device(at::kCPU);
  int64_t bytes_ = 0;
  int64_t segment_slots_ = kUnboundedSlots;
};

}  // namespace magic
