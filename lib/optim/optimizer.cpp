#include "lib/optim/optimizer.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/optim/adam.h"
#include "lib/optim/sgd.h"

namespace magic {

int64_t optimizer_count(const TensorTree& state) {
  return state.at("count").item<int64_t>();
}

at::Tensor make_count(int64_t count) {
  return at::scalar_tensor(count, at::TensorOptions().dtype(at::kLong));
}

OptimizerConfig OptimizerConfig::from_json(const JsonFields& f, int64_t total_steps) {
  OptimizerConfig c;
  c.name = f.string("name", c.name);
  if (c.name != "sgd" && c.name != "adam" && c.name != "adamw") {
    f.fail("name", str_cat("unknown optimizer '", c.name, "'; expected one of sgd, adam, adamw"));
  }
  const double lr = f.number("lr");
  if (!(lr >= 0.0)) f.fail("lr", str_cat("expected a learning rate >= 0, got ", lr));
  c.schedule = LrSchedule::from_json(f.object_or_empty("schedule"), lr, total_steps);
  c.weight_decay = f.number("weight_decay", 0.0);
  if (c.name == "sgd") {
    c.momentum = f.number("momentum", 0.0);
    c.dampening = f.number("dampening", 0.0);
    c.nesterov = f.boolean("nesterov", false);
  } else {
    if (f.has("betas")) {
      auto betas = f.numbers("betas");
      if (betas.size() != 2) f.fail("betas", str_cat("expected [beta1, beta2], got ", betas.size(), " numbers"));
      c.beta1 = betas[0];
      c.beta2 = betas[1];
    }
    c.eps = f.number("eps", c.eps);
    c.eps_root = f.number("eps_root", c.eps_root);
  }
  if (f.has("clip_norm")) {
    c.clip_norm = f.number("clip_norm");
    if (!(*c.clip_norm > 0.0)) f.fail("clip_norm", "expected a norm > 0");
  }
  f.finish();
  return c;
}

std::shared_ptr<const Optimizer> make_optimizer(const OptimizerConfig& c) {
  if (c.name == "sgd") {
    return std::make_shared<Sgd>(Sgd::Options{c.schedule, c.momentum, c.dampening, c.weight_decay, c.nesterov});
  }
  if (c.name == "adam" || c.name == "adamw") {
    return std::make_shared<Adam>(
        Adam::Options{c.schedule, c.beta1, c.beta2, c.eps, c.eps_root, c.weight_decay, c.name == "adamw"});
  }
  throw InputError(str_cat("optimizer.name: unknown optimizer '", c.name, "'; expected one of sgd, adam, adamw"));
}

}  // namespace magic
