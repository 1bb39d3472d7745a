#include "lib/train/magic_pipeline.h"

#include <chrono>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/train/finite_guard.h"
#include "lib/train/replay_backward.h"

namespace magic {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

MagicResult run_magic(const StepFunction& step, const QueryFunction& query, const TrainState& initial,
                      const at::Tensor& w, const MagicOptions& options) {
  MagicResult result;
  CheckpointStore store(checkpoint_steps(options.schedule, step.num_steps()), options.spill_dir);
  auto start = std::chrono::steady_clock::now();
  StepObserver observer = options.on_step;
  if (options.stop_on_non_finite) {
    observer = [&options](int64_t t, const TrainState& before, const StepOutput& out) {
      const std::string where = str_cat("training step ", t);
      require_finite(out.grads.with_prefix("gradient of "), where);
      require_finite(out.next.params.with_prefix("parameter "), where);
      if (options.on_step) options.on_step(t, before, out);
    };
  }
  result.final_state = train_forward(step, initial, w, &store, observer);
  result.train_seconds = seconds_since(start);
  result.checkpoints = store.count();
  result.checkpoint_bytes = store.bytes();
  {
    at::NoGradGuard no_grad;
    const at::Tensor loss = query.loss(result.final_state.params);
    if (options.stop_on_non_finite) require_finite(loss, "the query loss", "after training");
    result.query_loss = loss.item<double>();
  }

  {
    dist::PhaseScope phase("query gradient");
    result.query_gradient = query.gradient(result.final_state.params);
    if (options.stop_on_non_finite) require_finite(result.query_gradient.with_prefix("dQ/d"), "query gradient");
  }

  start = std::chrono::steady_clock::now();
  ReplayObserver replay_observer = options.on_replay_step;
  if (options.stop_on_non_finite) {
    replay_observer = [&options](int64_t t, const StepVjp& vjp) {
      const std::string where = str_cat("REPLAY step ", t);
      require_finite(vjp.cotangent.params.with_prefix("dQ/d"), where);
      require_finite(vjp.dw, "its contribution to the scores", where);
      if (options.on_replay_step) options.on_replay_step(t, vjp);
    };
  }
  ReplayBackward replay(step, store, w, replay_observer);
  if (options.per_query) {
    std::vector<at::Tensor> rows;
    for (int64_t j = 0; j < query.num_queries(); ++j) {
      ReplayResult r = replay.run(query.gradient(result.final_state.params, j));
      rows.push_back(step.assemble_weight_gradient(r.dw));
      result.peak_states_held = std::max(result.peak_states_held, r.peak_states_held);
    }
    result.scores = at::stack(rows);
  } else {
    ReplayResult r = replay.run(result.query_gradient);
    result.scores = step.assemble_weight_gradient(r.dw);
    result.peak_states_held = r.peak_states_held;
  }
  result.replay_seconds = seconds_since(start);
  if (options.stop_on_non_finite) require_finite(result.scores, "scores", "after REPLAY");
  return result;
}

}  // namespace magic
