#include "checks/hessian_vector_product.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"

namespace magic {

TensorTree hessian_vector_product(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w,
                                  const TensorTree& direction) {
  dist::PhaseScope phase(str_cat("HVP at step ", t));
  TensorTree leaves = state.params.requires_grad();
  TensorTree g = step.gradient(TrainState{leaves, state.opt, state.persistent.detach()}, t, w.detach(),
                               /*create_graph=*/true);
  const at::Tensor gv = dot(g, direction);
  // A gradient that does not depend on θ (its graph was cut) has a zero derivative.
  if (!gv.requires_grad()) return leaves.zeros_like();
  return with_values(leaves, torch::autograd::grad({gv}, leaves.tensors(), {}, false, false, true)).detach();
}

}  // namespace magic
