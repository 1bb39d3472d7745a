#include "lib/train/magic_pipeline.h"

#include <chrono>

#include "lib/distributed/runtime/progress.h"
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
  result.final_state = train_forward(step, initial, w, &store, options.on_step);
  result.train_seconds = seconds_since(start);
  result.checkpoints = store.count();
  result.checkpoint_bytes = store.bytes();
  {
    at::NoGradGuard no_grad;
    result.query_loss = query.loss(result.final_state.params).item<double>();
  }

  {
    dist::PhaseScope phase("query gradient");
    result.query_gradient = query.gradient(result.final_state.params);
  }

  start = std::chrono::steady_clock::now();
  ReplayBackward replay(step, store, w);
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
  return result;
}

}  // namespace magic
