// Scores against the independent oracle: retraining with one weight perturbed, derivatives by
// Ridders extrapolation of central differences.
#include <gtest/gtest.h>

#include "checks/metagradient_fd.h"
#include "lib/core/strings.h"
#include "lib/train/magic_pipeline.h"
#include "tests/support.h"

namespace magic {
namespace {

// The k examples with the largest |score|: those a wrong derivative would move most.
std::vector<int64_t> largest(const at::Tensor& scores, int64_t k) {
  auto top = scores.reshape({-1}).abs().topk(k);
  auto idx = std::get<1>(top);
  return std::vector<int64_t>(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + k);
}

class ScoresVsFiniteDifferences : public ::testing::TestWithParam<std::string> {};

TEST_P(ScoresVsFiniteDifferences, AgreeToRelativeErrorOneInHundredThousand) {
  testing::TinyRun run;
  run.optimizer = GetParam();
  run.schedule = "cosine";
  run.clip = true;
  const LmProblem problem = testing::tiny_lm_problem(run);
  MagicResult result = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, {});
  auto fd = checks::compare_scores_with_fd(*problem.step, *problem.query, problem.initial, problem.weights,
                                           result.scores, largest(result.scores, 5), 1e-5);
  for (size_t i = 0; i < fd.indices.size(); ++i) {
    RecordProperty("doc" + std::to_string(fd.indices[i]), format_sci(fd.relative_errors[i], 2));
  }
  EXPECT_TRUE(fd.passed) << fd.message;
  EXPECT_EQ(fd.indices.size(), 5u);
  EXPECT_LE(fd.max_relative_error, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ScoresVsFiniteDifferences, ::testing::Values("sgd", "adamw"));

TEST(ScoresVsFiniteDifferences, CatchesAScoreThatIsOffByOnePercent) {
  testing::TinyRun run;
  const LmProblem problem = testing::tiny_lm_problem(run);
  MagicResult result = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, {});
  auto fd = checks::compare_scores_with_fd(*problem.step, *problem.query, problem.initial, problem.weights,
                                           result.scores * 1.01, largest(result.scores, 1), 1e-5);
  EXPECT_FALSE(fd.passed);
  EXPECT_NE(fd.message.find("relative error"), std::string::npos) << fd.message;
}

TEST(Ridders, FindsTheDerivativeWhereAFixedStepIsFarOff) {
  // f(x) = sin(1000 x) + x at 0: f'(0) = 1001. A central difference with h = 1e-2 gives
  // (sin(10) - sin(-10)) / 0.02 + 1 ≈ -26.2: off by 103%.
  auto f = [](double h) { return std::sin(1000.0 * h) + h; };
  const double fixed = (f(1e-2) - f(-1e-2)) / 2e-2;
  EXPECT_GT(std::abs(fixed - 1001.0) / 1001.0, 0.5);
  auto estimate = checks::ridders_derivative(f);
  EXPECT_NEAR(estimate.value, 1001.0, 1e-6 * 1001.0);
  EXPECT_LT(estimate.step, 1e-2) << "the sweep found the smaller steps";
}

}  // namespace
}  // namespace magic
