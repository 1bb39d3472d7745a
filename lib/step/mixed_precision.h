// How a training step and a query apply a PrecisionPolicy (lib/core/precision_policy.h):
//   θ_c = compute(enter(θ))       (reduce dtype = master: the gather and its backward's sums
//                                   run on master values; reduce = compute: θ is cast first)
//   L   = loss(θ_c) in master      (logits are widened before the cross entropy)
//   g   = unscale(reduce(Σ_m ∇(S·L_m)))  the gradient the optimizer and clipping see, in master;
//                                   the micro-batches' gradients (micro_batches.h) summed in master
//   θ'  = store(update(θ, g))      parameters stay in the master dtype
// A class, not free functions, so magic-check can plant precision bugs as variants of it
// (checks/planted_variants.cpp) in the pipeline the user runs.
#pragma once

#include "lib/core/precision_policy.h"
#include "lib/core/tensor_tree.h"
#include "lib/step/parallelism.h"

namespace magic {

// Every floating tensor of `tree` cast to `dtype` (differentiable: the cast's backward casts back).
TensorTree cast_floating(const TensorTree& tree, c10::ScalarType dtype);

class MixedPrecision {
 public:
  explicit MixedPrecision(PrecisionPolicy policy = {});
  virtual ~MixedPrecision() = default;

  const PrecisionPolicy& policy() const { return policy_; }

  // The stored parameters entered, in the reduce dtype: what the gradient reduction (enter()'s
  // backward) runs on, and where a pipeline accumulates its micro-batches' gradients.
  virtual TensorTree entered_params(const Parallelism& parallelism, const TensorTree& stored) const;
  // Entered parameters cast to the compute dtype.
  TensorTree to_compute(const TensorTree& entered) const { return cast_floating(entered, policy_.compute); }
  // Model output (logits) widened to the master dtype for the loss.
  at::Tensor to_master(const at::Tensor& x) const { return x.to(policy_.master); }
  // S·L (S = the loss scale).
  virtual at::Tensor scale_loss(const at::Tensor& loss) const;
  // `sum` plus one more micro-batch's gradient (micro_batches.h), accumulated in the master dtype.
  virtual TensorTree accumulate(const TensorTree& sum, const TensorTree& micro_batch) const;
  // The parallelism's gradient reduction, run in the reduce dtype; the result in master.
  virtual TensorTree reduce(const Parallelism& parallelism, const TensorTree& grads) const;
  // g / S, before clipping and the update.
  virtual TensorTree unscale(const TensorTree& grads) const;
  // The parameters an update produced, as stored for the next step.
  virtual TensorTree store(const TensorTree& updated) const { return updated; }

 private:
  PrecisionPolicy policy_;
};

}  // namespace magic
