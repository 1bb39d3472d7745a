// Which training states are saved for REPLAY. A checkpoint is the state before step i; step 0
// is always one. For N steps:
//   all:  every step
//   sqrt: every c = isqrt(N) steps until i >= N - c, then every step   (N=9: 0 3 6 7 8)
//   log:  next = cur + max(1, (N - cur) / 2)                            (N=9: 0 4 6 7 8)
//   budget: the fewest recomputations within a number of states (binomial_checkpointing.h,
//           checkpoint_plan.h); its checkpoints depend on the budget, so the functions below that
//           take a schedule alone refuse it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/train/replay_mode.h"

namespace magic {

enum class CheckpointSchedule { kAll, kSqrt, kLog, kBudget };
CheckpointSchedule parse_checkpoint_schedule(const std::string& name, const std::string& what = "checkpoints");
std::string checkpoint_schedule_name(CheckpointSchedule schedule);

int64_t isqrt(int64_t n);  // floor(sqrt(n)), exact

// Strictly increasing steps in [0, N), starting at 0.
std::vector<int64_t> checkpoint_steps(CheckpointSchedule schedule, int64_t num_steps);

// The most states REPLAY holds at once besides its checkpoints (segment k runs from checkpoint k
// to the next, L_k steps; REPLAY takes them latest first):
//   sequential: max_k L_k, the segment it recomputes;
//   pipelined:  max_k max(L_k, L_{k-1} + ⌊L_{k-1}/2⌋) + 2: the segment being traced (at most half
//               of the next one's length left once that one is begun: segment_walker.h), the next
//               one being recomputed, and two traced steps (one waiting, one being consumed).
int64_t segment_states_held(const std::vector<int64_t>& checkpoints, int64_t num_steps, ReplayMode mode);

// The checkpoints REPLAY keeps (none when they are spilled to disk) plus segment_states_held.
// Closed form for `all`, so a huge N costs nothing to estimate.
int64_t peak_states_held(CheckpointSchedule schedule, int64_t num_steps, bool spilled,
                         ReplayMode mode = ReplayMode::kSequential);

}  // namespace magic
