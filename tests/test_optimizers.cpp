// Our functional optimizers against LibTorch's own torch::optim implementations (an
// independent oracle with the same update rules when eps_root = 0), plus hand-derived values.
#include <gtest/gtest.h>

#include <torch/optim.h>

#include <cmath>

#include "checks/gradcheck.h"
#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/optim/adam.h"
#include "lib/optim/clip.h"
#include "lib/optim/sgd.h"

namespace magic {
namespace {

LrSchedule constant(double lr) {
  LrSchedule s;
  s.peak = lr;
  return s;
}

TensorTree random_tree(uint64_t seed) {
  auto gen = make_generator(seed);
  TensorTree t;
  t.insert("w", at::randn({3, 4}, gen, at::TensorOptions().dtype(at::kDouble)));
  t.insert("b", at::randn({4}, gen, at::TensorOptions().dtype(at::kDouble)));
  return t;
}

// Runs `steps` updates with gradients g_k = random_tree(100 + k) through both implementations.
void expect_matches_torch(const Optimizer& ours, torch::optim::Optimizer& theirs, std::vector<at::Tensor>& torch_params,
                          TensorTree params, int steps) {
  TensorTree state = ours.init(params);
  for (int k = 0; k < steps; ++k) {
    TensorTree grads = random_tree(100 + k);
    auto update = ours.update(params, grads, state);
    params = update.params;
    state = update.state;
    size_t i = 0;
    for (const auto& g : grads) torch_params[i++].mutable_grad() = g.tensor.clone();
    theirs.step();
    i = 0;
    for (const auto& p : params) {
      EXPECT_TRUE(at::allclose(p.tensor, torch_params[i].detach(), 1e-13, 1e-15)) << "step " << k << " " << p.name;
      ++i;
    }
  }
  EXPECT_EQ(optimizer_count(state), steps);
}

std::vector<at::Tensor> torch_copies(const TensorTree& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params) out.push_back(p.tensor.clone().requires_grad_(true));
  return out;
}

TEST(Optimizers, SgdWithMomentumDampeningAndDecayMatchesTorch) {
  TensorTree params = random_tree(1);
  auto tp = torch_copies(params);
  torch::optim::SGD theirs(tp, torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.2).weight_decay(0.01));
  Sgd ours({constant(0.1), 0.9, 0.2, 0.01, false});
  expect_matches_torch(ours, theirs, tp, params, 5);
}

TEST(Optimizers, SgdNesterovMatchesTorch) {
  TensorTree params = random_tree(2);
  auto tp = torch_copies(params);
  torch::optim::SGD theirs(tp, torch::optim::SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(0.1));
  Sgd ours({constant(0.05), 0.8, 0.0, 0.1, true});
  expect_matches_torch(ours, theirs, tp, params, 5);
}

TEST(Optimizers, AdamWithL2DecayMatchesTorch) {
  TensorTree params = random_tree(3);
  auto tp = torch_copies(params);
  torch::optim::Adam theirs(tp, torch::optim::AdamOptions(0.01).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.05));
  Adam ours({constant(0.01), 0.8, 0.95, 1e-6, 0.0, 0.05, false});
  expect_matches_torch(ours, theirs, tp, params, 6);
}

TEST(Optimizers, AdamWDecoupledDecayMatchesTorch) {
  TensorTree params = random_tree(4);
  auto tp = torch_copies(params);
  torch::optim::AdamW theirs(tp, torch::optim::AdamWOptions(0.02).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.1));
  Adam ours({constant(0.02), 0.9, 0.999, 1e-8, 0.0, 0.1, true});
  expect_matches_torch(ours, theirs, tp, params, 6);
}

TEST(Optimizers, AdamEpsRootSitsInsideTheRoot) {
  // First update from zero moments: m̂ = g, v̂ = g², so u = g / (sqrt(g² + eps_root) + eps).
  TensorTree params;
  params.insert("x", at::tensor({0.0}, at::kDouble));
  TensorTree grads;
  grads.insert("x", at::tensor({3e-3}, at::kDouble));
  Adam adam({constant(1.0), 0.9, 0.999, 1e-8, 1e-4, 0.0, false});
  auto update = adam.update(params, grads, adam.init(params));
  const double g = 3e-3, expected = -g / (std::sqrt(g * g + 1e-4) + 1e-8);
  EXPECT_NEAR(update.params.at("x").item<double>(), expected, 1e-15);
}

TEST(Optimizers, ScheduleIsReadAtTheCountBeforeTheIncrement) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::kLinear;
  s.peak = 1.0;
  s.warmup_steps = 2;
  s.total_steps = 4;
  Sgd sgd({s, 0.0, 0.0, 0.0, false});
  TensorTree params;
  params.insert("x", at::tensor({0.0}, at::kDouble));
  TensorTree grads;
  grads.insert("x", at::tensor({-1.0}, at::kDouble));
  TensorTree state = sgd.init(params);
  // lr(0) = 0 (warmup starts at 0), lr(1) = 0.5, lr(2) = 1 (peak), lr(3) = 0.5 (linear to 0 at step 4).
  std::vector<double> expected_x{0.0, 0.5, 1.5, 2.0};
  for (int k = 0; k < 4; ++k) {
    auto u = sgd.update(params, grads, state);
    params = u.params;
    state = u.state;
    EXPECT_DOUBLE_EQ(params.at("x").item<double>(), expected_x[k]) << "after update " << k;
  }
}

TEST(Schedules, WarmupLinearAndCosineValues) {
  LrSchedule cosine;
  cosine.kind = LrSchedule::Kind::kCosine;
  cosine.peak = 2.0;
  cosine.final_value = 0.2;
  cosine.warmup_steps = 4;
  cosine.total_steps = 24;
  EXPECT_DOUBLE_EQ(cosine.at(1), 0.5);                 // 2 · 1/4
  EXPECT_DOUBLE_EQ(cosine.at(4), 2.0);                 // peak when warmup ends
  EXPECT_NEAR(cosine.at(14), (2.0 + 0.2) / 2, 1e-15);  // halfway: cos(π/2) = 0
  EXPECT_DOUBLE_EQ(cosine.at(24), 0.2);
  EXPECT_DOUBLE_EQ(cosine.at(1000), 0.2);
  LrSchedule linear = cosine;
  linear.kind = LrSchedule::Kind::kLinear;
  EXPECT_NEAR(linear.at(9), 2.0 - 1.8 / 4, 1e-15);  // a quarter of the way down
}

TEST(Schedules, WarmupFractionAndErrors) {
  nlohmann::json j = {{"name", "cosine"}, {"warmup_fraction", 0.25}};
  auto s = LrSchedule::from_json(JsonFields(j, "cfg"), 1.0, 40);
  EXPECT_EQ(s.warmup_steps, 10);
  nlohmann::json both = {{"name", "linear"}, {"warmup_fraction", 0.1}, {"warmup_steps", 3}};
  EXPECT_THROW(LrSchedule::from_json(JsonFields(both, "cfg"), 1.0, 40), InputError);
  nlohmann::json unknown = {{"name", "exponential"}};
  EXPECT_THROW(LrSchedule::from_json(JsonFields(unknown, "cfg"), 1.0, 40), InputError);
}

TEST(Optimizers, UpdatesAreDifferentiableInParamsGradsAndState) {
  Adam adam({constant(0.1), 0.9, 0.99, 1e-8, 1e-6, 0.01, true});
  TensorTree params = random_tree(5);
  TensorTree state = adam.update(params, random_tree(6), adam.init(params)).state;  // non-zero moments
  auto fn = [&](const std::vector<at::Tensor>& x) {
    TensorTree p, g, s = state;
    p.insert("w", x[0]);
    p.insert("b", params.at("b"));
    g.insert("w", x[1]);
    g.insert("b", params.at("b"));
    s.set("nu.w", x[2]);
    auto u = adam.update(p, g, s);
    return std::vector<at::Tensor>{u.params.at("w"), u.state.at("mu.w")};
  };
  std::vector<at::Tensor> inputs{params.at("w").clone().requires_grad_(true),
                                 random_tree(7).at("w").requires_grad_(true),
                                 state.at("nu.w").clone().requires_grad_(true)};
  auto first = checks::gradcheck(fn, inputs);
  EXPECT_TRUE(first.passed) << first.message;
  auto second = checks::gradgradcheck(fn, inputs);
  EXPECT_TRUE(second.passed) << second.message;
}

TEST(Clip, ScalesToMaxNormOnlyWhenAboveAndIsDifferentiable) {
  TensorTree g = random_tree(8);
  const double n = norm(g).item<double>();
  EXPECT_NEAR(norm(clip_by_global_norm(g, n / 2)).item<double>(), n / 2 * n / (n + 1e-6), 1e-12);
  EXPECT_TRUE(at::equal(clip_by_global_norm(g, 10 * n).flatten(), g.flatten()));
  auto fn = [&](const std::vector<at::Tensor>& x) {
    TensorTree t;
    t.insert("w", x[0]);
    t.insert("b", x[1]);
    return std::vector<at::Tensor>{clip_by_global_norm(t, 0.5).flatten()};
  };
  auto result = checks::gradcheck(fn, {g.at("w").requires_grad_(true), g.at("b").requires_grad_(true)});
  EXPECT_TRUE(result.passed) << result.message;
}

}  // namespace
}  // namespace magic
