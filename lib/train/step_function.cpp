#include "lib/train/step_function.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/strings.h"
#include "lib/dist/progress.h"

namespace magic {

TensorTree QueryFunction::gradient(const TensorTree& params, std::optional<int64_t> index) const {
  TensorTree leaves = params.requires_grad();
  at::Tensor q = loss(leaves, index);
  return with_values(leaves, torch::autograd::grad({q}, leaves.tensors(), {}, false, false, true)).detach();
}

TensorTree hessian_vector_product(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w,
                                  const TensorTree& direction) {
  dist::PhaseScope phase(str_cat("HVP at step ", t));
  TensorTree leaves = state.params.requires_grad();
  TensorTree g = step.gradient(TrainState{leaves, state.opt, state.persistent.detach()}, t, w.detach(),
                               /*create_graph=*/true);
  return with_values(leaves, torch::autograd::grad({dot(g, direction)}, leaves.tensors(), {}, false, false, true))
      .detach();
}

}  // namespace magic
