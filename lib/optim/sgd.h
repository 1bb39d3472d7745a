// SGD with torchopt's semantics: L2 decay added to the gradient, then a momentum trace
//   t' = g (first update), t' = μ t + (1 - dampening) g (later updates),
//   u = g + μ t' (nesterov) or t',   θ' = θ - lr(count) u.
#pragma once

#include "lib/optim/optimizer.h"

namespace magic {

class Sgd : public Optimizer {
 public:
  struct Options {
    LrSchedule lr;
    double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
    bool nesterov = false;
  };
  explicit Sgd(Options options);

  std::string name() const override { return "sgd"; }
  TensorTree init(const TensorTree& params) const override;
  OptimizerUpdate update(const TensorTree& params, const TensorTree& grads, const TensorTree& state) const override;

 private:
  Options options_;
};

}  // namespace magic
