#include "checks/replay_start.h"

namespace magic::checks {

TrainState ReplayStartWatch::replay_start(const TrainState& state, const TensorTree& query_gradient) const {
  TrainState lambda = ForwardingStep::replay_start(state, query_gradient);
  start_ = lambda.params.detach();
  return lambda;
}

std::string replay_start_row_name(const std::string& name) {
  return name + "[start]";
}

PipelineOutputs replay_start_outputs(const dist::Group& world, const TensorTree& full_start, int64_t sum_length) {
  PipelineOutputs out;
  for (const auto& p : full_start) {
    // Rank r's copy in row r, zeros elsewhere: the sum over ranks is every rank's copy, exactly.
    const at::Tensor mine = p.tensor.reshape({-1});
    at::Tensor rows = at::zeros({world.size(), mine.numel()}, mine.options());
    rows[world.rank()].copy_(mine);
    out.push_back({"replay", replay_start_row_name(p.name), world.sum(rows).reshape({-1}), 0.0, false, sum_length});
    out.back().at_final_params = true;
  }
  return out;
}

PipelineOutputs replay_start_reference(const TensorTree& start, int64_t world_size, int64_t sum_length) {
  PipelineOutputs out;
  for (const auto& p : start) {
    out.push_back(
        {"replay", replay_start_row_name(p.name), p.tensor.reshape({-1}).repeat({world_size}), 0.0, false, sum_length});
    out.back().at_final_params = true;
  }
  return out;
}

}  // namespace magic::checks
