#include "lib/optim/adam.h"

#include <cmath>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

Adam::Adam(Options options) : options_(std::move(options)) {
  auto in_unit = [](double b) { return b >= 0.0 && b < 1.0; };
  if (!in_unit(options_.beta1) || !in_unit(options_.beta2)) {
    throw InputError(
        str_cat("optimizer.betas: expected values in [0, 1), got [", options_.beta1, ", ", options_.beta2, "]"));
  }
  if (options_.eps < 0.0 || options_.eps_root < 0.0) throw InputError("optimizer: eps and eps_root must be >= 0");
}

TensorTree Adam::init(const TensorTree& params) const {
  TensorTree state;
  state.insert("count", make_count(0));
  for (const auto& p : params) state.insert("mu." + p.name, at::zeros_like(p.tensor));
  for (const auto& p : params) state.insert("nu." + p.name, at::zeros_like(p.tensor));
  return state;
}

OptimizerUpdate Adam::update(const TensorTree& params, const TensorTree& grads, const TensorTree& state) const {
  const int64_t count = optimizer_count(state);
  const int64_t c = count + 1;
  const double lr = options_.lr.at(count);
  const double b1 = options_.beta1, b2 = options_.beta2, wd = options_.weight_decay;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(c));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(c));
  OptimizerUpdate out;
  TensorTree mu, nu;
  for (const auto& p : params) {
    at::Tensor g = grads.at(p.name);
    if (wd != 0.0 && !options_.decoupled_weight_decay) g = g + wd * p.tensor;
    at::Tensor m = b1 * state.at("mu." + p.name) + (1.0 - b1) * g;
    at::Tensor v = b2 * state.at("nu." + p.name) + (1.0 - b2) * g * g;
    at::Tensor u = (m / correction1) / ((v / correction2 + options_.eps_root).sqrt() + options_.eps);
    if (wd != 0.0 && options_.decoupled_weight_decay) u = u + wd * p.tensor;
    out.params.insert(p.name, p.tensor - lr * u);
    mu.insert("mu." + p.name, m);
    nu.insert("nu." + p.name, v);
  }
  out.state.insert("count", make_count(c));
  out.state = merge(merge(out.state, mu), nu);
  return out;
}

}  // namespace magic
