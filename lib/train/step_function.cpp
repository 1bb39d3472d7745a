#include "lib/train/step_function.h"

#include <torch/csrc/autograd/autograd.h>

namespace magic {

TensorTree query_gradient(const QueryFunction& query, const TensorTree& params, std::optional<int64_t> index) {
  TensorTree leaves = params.requires_grad();
  at::Tensor q = query.loss(leaves, index);
  auto grads = torch::autograd::grad({q}, leaves.tensors(), {}, false, false, true);
  TensorTree out;
  size_t i = 0;
  for (const auto& e : leaves) {
    out.insert(e.name, grads[i].defined() ? grads[i].detach() : at::zeros_like(e.tensor));
    ++i;
  }
  return out;
}

}  // namespace magic
