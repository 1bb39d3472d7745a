// The reference's one-step products (reference::lm_step_vjp), the partner of magic-check's replay
// rows, checked by routes that share nothing with it: chained over every step they must give the
// unrolled run's dQ/dw and its own cotangents (the chain rule), and the clip's derivative must
// match a central difference of the clip coefficient times its cotangent (from the engine's gradient).
#include <gtest/gtest.h>

#include "lib/core/seed.h"
#include "lib/train/magic_pipeline.h"
#include "tests/support.h"

namespace magic {
namespace {

using testing::TinyRun;

TinyRun clipped_adam() {
  TinyRun run;
  run.optimizer = "adam";
  run.weights = "per_token";
  run.clip = true;
  run.steps = 4;
  return run;
}

struct Products {
  RunConfig config = testing::tiny_run_config(clipped_adam());
  LmProblem problem = build_lm_problem(config);
  reference::UnrolledLmSetup setup = testing::unrolled_setup(problem, config);
  reference::UnrolledLmResult unrolled = reference::unrolled_lm_scores(setup, problem.weights);
};

Products clipped_adam_run() {
  return Products{};
}

reference::LmStepVjp product_at(const Products& p, size_t t) {
  return reference::lm_step_vjp(p.setup, p.unrolled.step_params[t], p.unrolled.step_opt[t], p.problem.weights,
                                static_cast<int64_t>(t), p.unrolled.step_param_cotangents[t],
                                p.unrolled.step_opt_cotangents[t]);
}

TEST(ReferenceStepProducts, ChainedOverEveryStepTheyGiveTheUnrolledScoresAndCotangents) {
  const Products p = clipped_adam_run();
  const size_t steps = p.unrolled.step_params.size();
  ASSERT_EQ(p.unrolled.step_param_cotangents.size(), steps);
  at::Tensor summed = at::zeros_like(p.unrolled.scores);
  for (size_t t = 0; t < steps; ++t) {
    const reference::LmStepVjp vjp = product_at(p, t);
    summed = summed + vjp.dw;
    if (t == 0) continue;
    // λ_t from step t's product is the cotangent step t-1's product was taken against.
    EXPECT_LE(testing::relative_error(vjp.params.flatten(), p.unrolled.step_param_cotangents[t - 1].flatten()), 1e-10)
        << "step " << t;
    EXPECT_LE(testing::relative_error(vjp.opt.flatten(), p.unrolled.step_opt_cotangents[t - 1].flatten()), 1e-10)
        << "step " << t;
  }
  EXPECT_GT(p.unrolled.scores.abs().max().item<double>(), 1e-8);
  EXPECT_LE(testing::relative_error(summed, p.unrolled.scores), 1e-10);
}

TEST(ReferenceStepProducts, TheClipGradientMatchesACentralDifferenceOfTheCoefficient) {
  const Products p = clipped_adam_run();
  int clipped_steps = 0;
  for (size_t t = 0; t < p.unrolled.step_params.size(); ++t) {
    const reference::LmStepVjp vjp = product_at(p, t);
    ASSERT_FALSE(vjp.clip_gradient.empty());
    const bool clips = p.unrolled.step_clip_coefficients[t].item<double>() < 1.0;
    clipped_steps += clips ? 1 : 0;
    // c(θ ± h·d) = min(1, max / (||g|| + 1e-6)) from the engine's gradient of step t's batch.
    at::Generator gen = make_generator(derive_seed(7, "clip-direction"));
    const TensorTree d =
        p.unrolled.step_params[t].map([&](const at::Tensor& x) { return at::randn(x.sizes(), gen, x.options()); });
    const double h = 1e-6, max_norm = *p.config.optimizer.clip_norm;
    const auto coefficient_at = [&](double sign) {
      const TrainState moved{add(p.unrolled.step_params[t], scale(d, sign * h)).requires_grad(), {}, {}};
      const double g =
          norm(p.problem.step->gradient(moved, static_cast<int64_t>(t), p.problem.weights, false)).item<double>();
      return std::min(1.0, max_norm / (g + 1e-6));
    };
    // The row is κ·∂c/∂θ with κ = μ·g, the cotangent the coefficient receives.
    const double kappa = dot(vjp.gradient_cotangent, p.unrolled.step_grads[t]).item<double>();
    const double difference = kappa * (coefficient_at(1) - coefficient_at(-1)) / (2 * h);
    double directional = 0;
    for (const auto& e : vjp.clip_gradient) directional += (e.tensor * d.at(e.name)).sum().item<double>();
    EXPECT_NEAR(directional, difference, 1e-6 * std::max(1.0, std::abs(difference))) << "step " << t;
    if (!clips) {
      EXPECT_EQ(directional, 0.0) << "step " << t << " does not clip: c = 1 has no derivative";
    }
  }
  EXPECT_GE(clipped_steps, 1) << "the clip never fired: its derivative was not checked";
}

}  // namespace
}  // namespace magic
