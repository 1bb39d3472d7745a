#include "lib/step/step_function.h"

#include <torch/csrc/autograd/autograd.h>

namespace magic {

TensorTree QueryFunction::gradient(const TensorTree& params, std::optional<int64_t> index) const {
  TensorTree leaves = params.requires_grad();
  at::Tensor q = loss(leaves, index);
  return with_values(leaves, torch::autograd::grad({q}, leaves.tensors(), {}, false, false, true)).detach();
}

}  // namespace magic
