#include "lib/optim/clip.h"

namespace magic {

TensorTree clip_by_global_norm(const TensorTree& grads, double max_norm) {
  at::Tensor coefficient = (max_norm / (norm(grads) + 1e-6)).clamp_max(1.0);
  return grads.map([&](const at::Tensor& g) { return g * coefficient; });
}

}  // namespace magic
