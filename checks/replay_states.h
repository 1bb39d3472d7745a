// REPLAY's states against training's (the replay level): REPLAY restores each segment's first
// state from a checkpoint and recomputes the rest with the same untraced step training ran, so on
// the CPU every state it takes a product at must equal the state training had at that step, bit
// for bit. A restore or recomputation bug that lives only in REPLAY shows here in every
// precision, where the scores of a chaotic low-precision run could not show it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checks/pipeline_outputs.h"
#include "lib/distributed/runtime/group.h"
#include "lib/step/train_state.h"
#include "lib/train/magic_pipeline.h"

namespace magic::checks {

// One rank's count over every REPLAY step it compared.
struct StateDifference {
  int64_t steps = 0;    // REPLAY steps compared
  int64_t entries = 0;  // entries of all compared states
  int64_t differing_entries = 0;
  int64_t differing_bits = 0;
  std::string first;  // "step 2, opt.mu.tok_emb" (the first differing entry this rank saw)
};

// Adds step t's comparison of the state REPLAY used with the one training started the step from.
// An entry missing on one side, or of another shape or dtype, counts as differing in full.
void add_state_difference(StateDifference& into, int64_t step, const TrainState& training, const TrainState& replayed);

// Records the state training started each step from and compares REPLAY's with it as REPLAY runs.
class ReplayStateWatch {
 public:
  // Sets the options' training and REPLAY observers; the watch must outlive the run.
  void attach(MagicOptions& options);
  const StateDifference& difference() const { return difference_; }

 private:
  std::vector<TrainState> trained_;
  StateDifference difference_;
};

// The replay/states output: [world, 2] (differing entries, differing bits) by rank, gathered over
// `world` (every rank calls it); `rank0` is rank 0's own count, for the first difference it saw.
NamedTensor replay_state_output(const dist::Group& world, const StateDifference& mine);
// The reference's partner of it: zeros, [world, 2].
NamedTensor replay_state_reference(int world_size);

// The row: passes when every rank's counts are 0 (in every precision: no rounding is allowed).
CheckRow replay_state_row(const NamedTensor& distributed, const NamedTensor& reference);

}  // namespace magic::checks
