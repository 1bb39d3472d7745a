#include "lib/train/step_function.h"

#include <torch/csrc/autograd/autograd.h>

namespace magic {

TensorTree QueryFunction::gradient(const TensorTree& params, std::optional<int64_t> index) const {
  TensorTree leaves = params.requires_grad();
  at::Tensor q = loss(leaves, index);
  auto grads = torch::autograd::grad({q}, leaves.tensors(), {}, false, false, true);
  TensorTree out;
  size_t i = 0;
  for (const auto& e : leaves) {
    out.insert(e.name, grads[i].defined() ? grads[i].detach() : at::zeros_like(e.tensor));
    ++i;
  }
  return out;
}

TensorTree hessian_vector_product(const StepFunction& step, const TensorTree& params, int64_t t, const at::Tensor& w,
                                  const TensorTree& direction) {
  TensorTree leaves = params.requires_grad();
  TensorTree g = step.gradient(leaves, t, w.detach(), /*create_graph=*/true);
  auto hv = torch::autograd::grad({dot(g, direction)}, leaves.tensors(), {}, false, false, true);
  TensorTree out;
  size_t i = 0;
  for (const auto& e : leaves) {
    out.insert(e.name, hv[i].defined() ? hv[i].detach() : at::zeros_like(e.tensor));
    ++i;
  }
  return out;
}

}  // namespace magic
