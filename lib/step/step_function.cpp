#include "lib/step/step_function.h"

#include <torch/csrc/autograd/autograd.h>

namespace magic {

TrainState StepFunction::replay_start(const TrainState& state, const TensorTree& query_gradient) const {
  TrainState lambda = zero_cotangent(state);
  lambda.params = query_gradient.detach();
  return lambda;
}

TensorTree QueryFunction::gradient(const TensorTree& params, std::optional<int64_t> index) const {
  TensorTree leaves = params.requires_grad();
  at::Tensor q = loss(leaves, index);
  return with_values(leaves, torch::autograd::grad({q}, leaves.tensors(), {}, false, false, true)).detach();
}

}  // namespace magic
