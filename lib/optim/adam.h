// Adam and AdamW with torchopt's semantics. The count increments first (c = count + 1):
//   m' = β1 m + (1-β1) g,  v' = β2 v + (1-β2) g²,  m̂ = m'/(1-β1^c),  v̂ = v'/(1-β2^c)
//   u = m̂ / (sqrt(v̂ + eps_root) + eps)        (eps_root inside the root keeps d sqrt finite)
//   Adam:  g includes L2 decay (g + wd θ);  AdamW: u += wd θ (decoupled)
//   θ' = θ - lr(count) u, with the schedule read at the count before the increment.
#pragma once

#include "lib/optim/optimizer.h"

namespace magic {

class Adam : public Optimizer {
 public:
  struct Options {
    LrSchedule lr;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, eps_root = 0.0, weight_decay = 0.0;
    bool decoupled_weight_decay = false;  // true: AdamW
  };
  explicit Adam(Options options);

  std::string name() const override { return options_.decoupled_weight_decay ? "adamw" : "adam"; }
  TensorTree init(const TensorTree& params) const override;
  OptimizerUpdate update(const TensorTree& params, const TensorTree& grads, const TensorTree& state) const override;

 private:
  Options options_;
};

}  // namespace magic
