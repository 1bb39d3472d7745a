#include "lib/optim/sgd.h"

#include "lib/core/error.h"

namespace magic {

Sgd::Sgd(Options options) : options_(std::move(options)) {
  if (options_.nesterov && (options_.momentum <= 0.0 || options_.dampening != 0.0)) {
    throw InputError("optimizer: nesterov needs momentum > 0 and dampening 0");
  }
}

TensorTree Sgd::init(const TensorTree& params) const {
  TensorTree state;
  state.insert("count", make_count(0));
  if (options_.momentum > 0.0) {
    for (const auto& p : params) state.insert("trace." + p.name, at::zeros_like(p.tensor));
  }
  return state;
}

OptimizerUpdate Sgd::update(const TensorTree& params, const TensorTree& grads, const TensorTree& state) const {
  const int64_t count = optimizer_count(state);
  const double lr = options_.lr.at(count);
  const double mu = options_.momentum;
  OptimizerUpdate out;
  out.state.insert("count", make_count(count + 1));
  for (const auto& p : params) {
    at::Tensor g = grads.at(p.name);
    if (options_.weight_decay != 0.0) g = g + options_.weight_decay * p.tensor;
    at::Tensor u = g;
    if (mu > 0.0) {
      at::Tensor trace = count == 0 ? g : mu * state.at("trace." + p.name) + (1.0 - options_.dampening) * g;
      out.state.insert("trace." + p.name, trace);
      u = options_.nesterov ? g + mu * trace : trace;
    }
    out.params.insert(p.name, p.tensor - lr * u);
  }
  return out;
}

}  // namespace magic
