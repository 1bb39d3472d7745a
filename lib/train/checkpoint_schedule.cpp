#include "lib/train/checkpoint_schedule.h"

#include <algorithm>
#include <stdexcept>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

CheckpointSchedule parse_checkpoint_schedule(const std::string& name, const std::string& what) {
  if (name == "all") return CheckpointSchedule::kAll;
  if (name == "sqrt") return CheckpointSchedule::kSqrt;
  if (name == "log") return CheckpointSchedule::kLog;
  throw InputError(str_cat(what, ": unknown checkpoint schedule '", name, "'; expected one of all, sqrt, log"));
}

std::string checkpoint_schedule_name(CheckpointSchedule schedule) {
  switch (schedule) {
    case CheckpointSchedule::kAll:
      return "all";
    case CheckpointSchedule::kSqrt:
      return "sqrt";
    case CheckpointSchedule::kLog:
      return "log";
    case CheckpointSchedule::kBudget:
      return "budget";
  }
  return "?";
}

int64_t isqrt(int64_t n) {
  if (n < 0) throw std::invalid_argument("isqrt of a negative number");
  int64_t r = 0;
  while ((r + 1) * (r + 1) <= n) ++r;
  return r;
}

std::vector<int64_t> checkpoint_steps(CheckpointSchedule schedule, int64_t n) {
  if (n < 1) throw std::invalid_argument(str_cat("checkpoint_steps: need >= 1 step, got ", n));
  if (schedule == CheckpointSchedule::kBudget) {
    throw std::logic_error("checkpoint_steps: a budget's checkpoints depend on it (plan_checkpoints)");
  }
  std::vector<int64_t> steps;
  const int64_t c = isqrt(n);
  for (int64_t i = 0; i < n;) {
    steps.push_back(i);
    switch (schedule) {
      case CheckpointSchedule::kAll:
        i += 1;
        break;
      case CheckpointSchedule::kSqrt:
        i += (i >= n - c) ? 1 : c;
        break;
      case CheckpointSchedule::kLog:
        i += std::max<int64_t>(1, (n - i) / 2);
        break;
      case CheckpointSchedule::kBudget:
        break;
    }
  }
  return steps;
}

int64_t segment_states_held(const std::vector<int64_t>& checkpoints, int64_t n, ReplayMode mode) {
  const auto length = [&](size_t k) { return (k + 1 < checkpoints.size() ? checkpoints[k + 1] : n) - checkpoints[k]; };
  int64_t held = 0;
  for (size_t k = 0; k < checkpoints.size(); ++k) {
    const int64_t next = k > 0 ? length(k - 1) : 0;
    held = std::max(held, mode == ReplayMode::kSequential ? length(k) : std::max(length(k), next + next / 2) + 2);
  }
  return held;
}

int64_t peak_states_held(CheckpointSchedule schedule, int64_t n, bool spilled, ReplayMode mode) {
  if (schedule == CheckpointSchedule::kAll) {
    // Every segment is one step long.
    const int64_t segments = mode == ReplayMode::kSequential ? 1 : 3;
    return (spilled ? 0 : n) + segments;
  }
  const std::vector<int64_t> steps = checkpoint_steps(schedule, n);
  return (spilled ? 0 : static_cast<int64_t>(steps.size())) + segment_states_held(steps, n, mode);
}

}  // namespace magic
