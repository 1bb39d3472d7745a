#include "lib/train/time_estimate.h"

#include <algorithm>
#include <chrono>

#include "lib/core/intra_op_threads.h"
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
                 retrainings > 0 ? str_cat(", LDS about ", format_duration(lds), " for ", retrainings, " retrainings")
                                 : std::string(),
                 " (calibration: ", format_duration(step_seconds), " a step, ", format_duration(vjp_seconds),
                 " a step's VJP",
                 pipelined ? str_cat(", pipelined: ", format_duration(trace_seconds), " traced on one thread, ",
                                     format_duration(back_seconds), " back on the other")
                           : std::string(),
                 ")");
}

void TimeEstimate::add_retrainings(int64_t count) {
  retrainings = count;
  lds = static_cast<double>(count) * training;
}

TimeEstimate estimate_time(const StepFunction& step, const TrainState& initial, const at::Tensor& w,
                           int64_t recomputed_steps, int64_t products, ReplayMode mode, int64_t traces) {
  dist::PhaseScope phase("calibration step");
  TimeEstimate e;
  StepOutput out;
  // Each is run twice and the second timed: the first call pays one-time costs (allocations,
  // kernel selection) that the run's thousands of steps do not.
  out = step.step(initial, 0, w, false);
  e.step_seconds = timed([&] { out = step.step(initial, 0, w, false); });
  const auto n = static_cast<double>(step.num_steps());
  const auto recomputed = static_cast<double>(recomputed_steps);
  e.training = n * e.step_seconds;
  // Any cotangent of the right shapes times the product: the next state itself.
  const auto R = static_cast<double>(products), K = static_cast<double>(std::max<int64_t>(traces, 1));
  TracedStep traced;
  if (mode == ReplayMode::kSequential) {
    step_vjp(step, initial, 0, w, out.next);
    e.trace_seconds = timed([&] { traced = trace_step(step, initial, 0, w); });
    e.back_seconds = timed([&] { backward_through(step, std::move(traced), out.next); });
    e.vjp_seconds = e.trace_seconds + e.back_seconds;
    e.replay = n * (K * e.trace_seconds + R * e.back_seconds) + recomputed * e.step_seconds;
    return e;
  }
  e.pipelined = true;
  const PipelineThreads threads = pipeline_threads(at::get_num_threads());
  double worker_step = 0;
  {
    IntraOpThreadsScope worker(threads.worker);
    step.step(initial, 0, w, false);
    worker_step = timed([&] { step.step(initial, 0, w, false); });
    backward_through(step, trace_step(step, initial, 0, w), out.next);
    e.trace_seconds = timed([&] { traced = trace_step(step, initial, 0, w); });
  }
  {
    IntraOpThreadsScope caller(threads.caller);
    e.back_seconds = timed([&] { backward_through(step, std::move(traced), out.next); });
  }
  e.vjp_seconds = e.trace_seconds + e.back_seconds;
  e.replay =
      std::max(n * (R * e.back_seconds + (K - 1.0) * e.trace_seconds), n * e.trace_seconds + recomputed * worker_step);
  return e;
}

}  // namespace magic
