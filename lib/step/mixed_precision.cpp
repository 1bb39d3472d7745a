#include "lib/step/mixed_precision.h"

namespace magic {

MixedPrecision::MixedPrecision(PrecisionPolicy policy) : policy_(policy) {}

TensorTree cast_floating(const TensorTree& tree, c10::ScalarType dtype) {
  return tree.map([dtype](const at::Tensor& t) { return t.is_floating_point() ? t.to(dtype) : t; });
}

TensorTree MixedPrecision::entered_params(const Parallelism& parallelism, const TensorTree& stored) const {
  if (policy_.reduce == policy_.compute) return parallelism.enter(cast_floating(stored, policy_.compute));
  return parallelism.enter(stored);
}

at::Tensor MixedPrecision::scale_loss(const at::Tensor& loss) const {
  return policy_.loss_scale == 1.0 ? loss : loss * policy_.loss_scale;
}

TensorTree MixedPrecision::accumulate(const TensorTree& sum, const TensorTree& micro_batch) const {
  return add(cast_floating(sum, policy_.master), cast_floating(micro_batch, policy_.master));
}

TensorTree MixedPrecision::reduce(const Parallelism& parallelism, const TensorTree& grads) const {
  if (policy_.reduce == policy_.master) return parallelism.reduce_gradient(grads);
  return cast_floating(parallelism.reduce_gradient(cast_floating(grads, policy_.reduce)), policy_.master);
}

TensorTree MixedPrecision::unscale(const TensorTree& grads) const {
  return policy_.loss_scale == 1.0 ? grads : scale(grads, 1.0 / policy_.loss_scale);
}

}  // namespace magic
