// What a run's checkpoint schedule does, whichever it is: the steps training saves, the states
// REPLAY may hold per segment beside its first (a budget's binomial checkpointing, or every
// state), how many steps REPLAY recomputes, and the most states it holds at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/train/checkpoint_schedule.h"

namespace magic {

struct CheckpointPlan {
  std::vector<int64_t> steps;
  int64_t segment_slots = 0;   // CheckpointStore::segment_slots
  int64_t recomputations = 0;  // untraced steps REPLAY recomputes: N − C for all, sqrt and log
  int64_t states = 0;          // peak_states_held, or the budget's plan's
};

// `budget_states`: with kBudget, the states its budget holds (at least least_budget_states).
// A budget runs REPLAY sequentially (pipelined, the next segment's states would come on top).
CheckpointPlan plan_checkpoints(CheckpointSchedule schedule, int64_t num_steps, int64_t budget_states, bool spilled,
                                ReplayMode mode = ReplayMode::kSequential);

// "sqrt checkpoints", or "checkpoints within a 2.0 MiB budget (6 states: 3 checkpoints, 1 more a
// segment; 14 steps recomputed)", for the run's header and refusals.
std::string plan_summary(CheckpointSchedule schedule, const CheckpointPlan& plan, int64_t budget_bytes);

}  // namespace magic
