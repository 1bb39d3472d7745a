#include "lib/optim/clip.h"

namespace magic {

TensorTree clip_by_global_norm(const TensorTree& grads, double max_norm) {
  return clip_by_global_norm(grads, max_norm, norm(grads));
}

TensorTree clip_by_global_norm(const TensorTree& grads, double max_norm, const at::Tensor& global_norm) {
  const at::Tensor coefficient = clip_coefficient(max_norm, global_norm);
  return grads.map([&](const at::Tensor& g) { return g * coefficient; });
}

at::Tensor clip_coefficient(double max_norm, const at::Tensor& global_norm) {
  return (max_norm / (global_norm + kClipNormEpsilon)).clamp_max(1.0);
}

}  // namespace magic
