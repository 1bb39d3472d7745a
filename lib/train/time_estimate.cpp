#include "lib/train/time_estimate.h"

#include <chrono>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/train/progress_meter.h"
#include "lib/train/replay_backward.h"

namespace magic {
namespace {

template <typename Fn>
double timed(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string TimeEstimate::str() const {
  return str_cat("training about ", format_duration(training), ", REPLAY about ", format_duration(replay),
                 " (calibration: ", format_duration(step_seconds), " a step, ", format_duration(vjp_seconds),
                 " a step's VJP)");
}

TimeEstimate estimate_time(const StepFunction& step, const TrainState& initial, const at::Tensor& w,
                           CheckpointSchedule schedule, int64_t replays) {
  dist::PhaseScope phase("calibration step");
  TimeEstimate e;
  StepOutput out;
  // Each is run twice and the second timed: the first call pays one-time costs (allocations,
  // kernel selection) that the run's thousands of steps do not.
  out = step.step(initial, 0, w, false);
  e.step_seconds = timed([&] { out = step.step(initial, 0, w, false); });
  // Any cotangent of the right shapes times the product: the next state itself.
  step_vjp(step, initial, 0, w, out.next);
  e.vjp_seconds = timed([&] { step_vjp(step, initial, 0, w, out.next); });
  const auto n = static_cast<double>(step.num_steps());
  const auto recomputed = n - static_cast<double>(checkpoint_steps(schedule, step.num_steps()).size());
  e.training = n * e.step_seconds;
  e.replay = static_cast<double>(replays) * (n * e.vjp_seconds + recomputed * e.step_seconds);
  return e;
}

}  // namespace magic
