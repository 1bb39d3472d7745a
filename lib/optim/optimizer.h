// Differentiable functional optimizers: pure functions (params, grads, state) -> (params, state)
// built from differentiable tensor ops, so REPLAY can take vector-Jacobian products through
// them. State is a tree: "count" (int64 update count) plus per-parameter slots
// ("mu.<param>", "nu.<param>", "trace.<param>").
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "lib/core/json_fields.h"
#include "lib/core/tensor_tree.h"
#include "lib/optim/schedule.h"

namespace magic {

struct OptimizerUpdate {
  TensorTree params;
  TensorTree state;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  virtual TensorTree init(const TensorTree& params) const = 0;
  virtual OptimizerUpdate update(const TensorTree& params, const TensorTree& grads, const TensorTree& state) const = 0;
};

// The update count stored in an optimizer state.
int64_t optimizer_count(const TensorTree& state);
at::Tensor make_count(int64_t count);

// Everything a training config says about optimization.
struct OptimizerConfig {
  std::string name = "sgd";  // sgd | adam | adamw
  LrSchedule schedule;
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // torchopt's default is 0; MAGIC needs d sqrt(v + eps_root) finite where v = 0 (rows of the
  // embedding no batch touched), so our default is 1e-12.
  double eps_root = 1e-12;
  std::optional<double> clip_norm;

  // {"name", "lr", "momentum", "dampening", "weight_decay", "nesterov", "betas": [b1, b2],
  //  "eps", "eps_root", "clip_norm", "schedule": {...}}
  static OptimizerConfig from_json(const JsonFields& fields, int64_t total_steps);
};

std::shared_ptr<const Optimizer> make_optimizer(const OptimizerConfig& config);

}  // namespace magic
