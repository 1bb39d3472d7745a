// The whole MAGIC pipeline on one StepFunction/QueryFunction pair: forward training with
// checkpoints, the query gradient at θ_N, REPLAY backward. Scores = dQ/dw at w = 1; a negative
// score means up-weighting the example lowers the query loss.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "lib/step/step_function.h"
#include "lib/train/checkpoint_schedule.h"
#include "lib/train/forward_training.h"
#include "lib/train/replay_backward.h"

namespace magic {

// Where a run picked up an interrupted one's work.
struct ResumePoint {
  int64_t training_step = 0;      // training continued from this checkpoint
  int64_t replay_steps_done = 0;  // REPLAY steps (over all queries) already taken
};

struct MagicOptions {
  CheckpointSchedule schedule = CheckpointSchedule::kSqrt;
  int64_t budget_states = 0;             // kBudget: the states REPLAY may hold (checkpoint_plan.h); sequential only
  std::optional<std::string> spill_dir;  // spill checkpoints to disk under this directory
  bool per_query = false;                // scores per query, [Q, ...w.shape], all queries in one REPLAY pass
  // Per query: products taken together in one backward pass (replay_backward.h). More than one
  // takes more memory (memory_estimate.h) and pays where a step's kernels are small (a GPU, a tiny
  // model): on the demo config one at a time was faster (docs/benchmarks.md, "per_query_bench").
  int64_t query_batch = 1;
  // Per query: trace each step again for each batch of products instead of keeping its graph
  // between them (QueryProducts::retrace): a plain run's memory plus the cotangents, slower.
  bool retrace_per_query = false;
  bool replay = true;             // false: train and take the query gradient only (scores undefined)
  StepObserver on_step;           // sees every forward-training step
  ReplayObserver on_replay_step;  // sees every REPLAY step (per-query: every query's)
  // Told Q(θ_N) as soon as it is known, before REPLAY.
  std::function<void(double)> on_query_loss;
  // Sequential, or pipelined on two threads (replay_mode.h; with one intra-op thread each, the
  // scores equal a one-thread sequential REPLAY's bit for bit).
  ReplayMode replay_mode = ReplayMode::kSequential;
  // Stop at the first value that is not finite (finite_guard.h): a training step's gradient or
  // parameters, the query loss and gradient, a REPLAY step's cotangent, the scores.
  bool stop_on_non_finite = false;
  // This rank's folder of a run that can be resumed (run_folder.h): checkpoints and REPLAY's
  // progress (replay_journal.h) persist there, and whatever an interrupted run left is taken up.
  // Takes the place of spill_dir.
  std::optional<std::string> resume_folder;
  // The least of a value over all ranks (identity on one process), so that every rank resumes
  // from the same point.
  std::function<int64_t(int64_t)> least_across_ranks;
  std::function<void(const ResumePoint&)> on_resume;  // told when a run resumes
};

struct MagicResult {
  at::Tensor scores;
  TrainState final_state;
  TensorTree query_gradient;  // ∂Q/∂θ_N of the mean query loss
  double query_loss = 0.0;    // Q(θ_N), the mean over queries
  int64_t checkpoints = 0;
  int64_t checkpoint_bytes = 0;
  int64_t peak_states_held = 0;
  double train_seconds = 0.0, replay_seconds = 0.0;
};

MagicResult run_magic(const StepFunction& step, const QueryFunction& query, const TrainState& initial,
                      const at::Tensor& w, const MagicOptions& options);

}  // namespace magic
