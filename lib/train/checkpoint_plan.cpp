#include "lib/train/checkpoint_plan.h"

#include <stdexcept>

#include "lib/core/byte_size.h"
#include "lib/core/strings.h"
#include "lib/train/binomial_checkpointing.h"
#include "lib/train/checkpoint_store.h"

namespace magic {

CheckpointPlan plan_checkpoints(CheckpointSchedule schedule, int64_t n, int64_t budget_states, bool spilled,
                                ReplayMode mode) {
  CheckpointPlan plan;
  if (schedule == CheckpointSchedule::kBudget) {
    if (mode != ReplayMode::kSequential) throw std::logic_error("a checkpoint budget runs REPLAY sequentially");
    const BudgetPlan budget = plan_budget(n, budget_states, spilled);
    plan.steps = budget.checkpoints;
    plan.segment_slots = budget.segment_slots;
    plan.recomputations = budget.recomputations;
    plan.states = budget.states;
    return plan;
  }
  plan.steps = checkpoint_steps(schedule, n);
  plan.segment_slots = CheckpointStore::kUnboundedSlots;
  plan.recomputations = n - static_cast<int64_t>(plan.steps.size());
  plan.states = peak_states_held(schedule, n, spilled, mode);
  return plan;
}

std::string plan_summary(CheckpointSchedule schedule, const CheckpointPlan& plan, int64_t budget_bytes) {
  if (schedule != CheckpointSchedule::kBudget) return checkpoint_schedule_name(schedule) + " checkpoints";
  return str_cat("checkpoints within a ", format_bytes(static_cast<double>(budget_bytes)), " budget (", plan.states,
                 " states: ", plan.steps.size(), " checkpoints, ", plan.segment_slots, " more a segment; ",
                 plan.recomputations, " steps recomputed)");
}

}  // namespace magic
