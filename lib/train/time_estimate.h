// How long a MAGIC run will take, from a calibration step timed before it starts: one training
// step (t_step) and one step's vector-Jacobian product at s_0 with batch 0, tracing the step
// (t_trace) and its backward (t_back), each timed on its second call.
//   training ≈ N t_step
//   REPLAY   ≈ N (K t_trace + R t_back) + M t_step   (R products a step: 1, or one per query, all
//                                    queries in one pass; K traces a step: 1, or one per batch of
//                                    products with --retrace-per-query; M steps recomputed: N − C
//                                    with C checkpoints, a budget's count: checkpoint_plan.h)
// Pipelined (replay_mode.h), the first trace runs on the worker with the recomputation, the
// backward (and the traces after the first) on the caller, each timed with its share of the
// threads; the slower side sets the pace:
//   REPLAY   ≈ max(N (R t_back + (K − 1) t_trace), N t_trace + M t_step')
// With --validate lds, each of its R' retrainings (the subsets and the baseline) trains the run
// again untraced and without checkpoints, the same steps:
//   LDS      ≈ R' N t_step
// Steps differ in batch content, so this is a guide, not a promise; progress meters correct it.
#pragma once

#include <string>

#include "lib/step/step_function.h"
#include "lib/train/checkpoint_schedule.h"

namespace magic {

struct TimeEstimate {
  double step_seconds = 0, vjp_seconds = 0;
  double trace_seconds = 0, back_seconds = 0;  // vjp_seconds = trace + back
  bool pipelined = false;
  double training = 0, replay = 0;
  int64_t retrainings = 0;  // --validate lds: the subsets and the baseline
  double lds = 0;
  // "training about 16.8s, REPLAY about 31.8s (calibration: 0.35s a step, 0.62s a step's VJP)";
  // with retrainings, ", LDS about 9m14s for 33 retrainings" before the calibration.
  std::string str() const;
  // Adds --validate lds's `count` retrainings, each as long as training.
  void add_retrainings(int64_t count);
};

TimeEstimate estimate_time(const StepFunction& step, const TrainState& initial, const at::Tensor& w, int64_t recomputed,
                           int64_t products, ReplayMode mode = ReplayMode::kSequential, int64_t traces = 1);

}  // namespace magic
