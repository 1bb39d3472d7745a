// --validate lds: the statistic on constructed changes, and on a real tiny run, where MAGIC's exact
// metagradients predict what retraining shows (LDS near 1) and scores shuffled across examples
// do not: the measure can fail.
#include <gtest/gtest.h>

#include "lib/core/seed.h"
#include "lib/train/lds.h"
#include "lib/train/magic_pipeline.h"
#include "tests/support.h"

namespace magic {
namespace {

LdsResult constructed(const at::Tensor& actual, const at::Tensor& predicted) {
  LdsResult r;
  r.columns = {"the query set"};
  r.actual = actual.reshape({-1, 1});
  r.predicted = predicted.reshape({-1, 1});
  LdsOptions o;
  o.bootstrap = 400;
  estimate_lds(r, o, 0);
  return r;
}

TEST(Lds, StatisticIsSpearmanWithABootstrapIntervalAroundIt) {
  at::Generator gen = make_generator(7);
  const at::Tensor x = at::randn({40}, gen, at::kDouble);
  // A monotone, non-linear relation is ranked perfectly: Spearman 1, and -1 reversed.
  LdsResult up = constructed(x.pow(3), x);
  EXPECT_DOUBLE_EQ(up.mean.value, 1.0);
  EXPECT_DOUBLE_EQ(up.mean.low, 1.0);
  EXPECT_DOUBLE_EQ(constructed(-x.exp(), x).mean.value, -1.0);
  // Noisy: the interval contains the point estimate and is not degenerate.
  LdsResult noisy = constructed(x + 0.8 * at::randn({40}, gen, at::kDouble), x);
  EXPECT_LT(noisy.mean.low, noisy.mean.value);
  EXPECT_GT(noisy.mean.high, noisy.mean.value);
  EXPECT_GT(noisy.mean.value, 0.3);
  EXPECT_LT(noisy.mean.value, 0.95);
  // Unrelated: the interval covers 0.
  LdsResult none = constructed(at::randn({40}, gen, at::kDouble), x);
  EXPECT_LT(none.mean.low, 0.0);
  EXPECT_GT(none.mean.high, 0.0);
}

TEST(Lds, ExactMetagradientsPredictRetrainingAndShuffledScoresDoNot) {
  // Smooth training (plain SGD, large batch, fp64), as MAGIC's linearity needs; with momentum 0.9
  // at this learning rate the same data gives an LDS near 0.4.
  testing::TinyRun run;
  run.steps = 8;
  run.batch_size = 32;
  run.documents = 40;
  nlohmann::json j = testing::tiny_run_json(run);
  j["optimizer"] = {{"name", "sgd"}, {"lr", 0.5}};
  const LmProblem problem = build_lm_problem(RunConfig::from_json(j, "lds", testing::source_path("fixtures")));
  MagicOptions magic;
  magic.per_query = true;
  const at::Tensor scores = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, magic).scores;
  LdsOptions o;
  o.subsets = 12;
  o.drop_fraction = 0.1;
  o.bootstrap = 200;
  const LdsResult real = validate_lds(problem, scores, true, o);
  ASSERT_EQ(real.columns.size(), 1u + problem.query->num_queries());
  EXPECT_EQ(real.columns[1], problem.query_documents[0].id);
  std::cout << "LDS exact scores: " << real.mean.value << " [" << real.mean.low << ", " << real.mean.high << "]\n";
  EXPECT_GT(real.mean.value, 0.9);
  EXPECT_GT(real.per_column[0].value, 0.9) << "the query set's mean loss";

  // The same retrainings judged against scores shuffled across examples.
  const at::Tensor shuffled = scores.index_select(1, at::randperm(scores.size(1), make_generator(3), at::kLong));
  const LdsResult wrong = validate_lds(problem, shuffled, true, o);
  std::cout << "LDS shuffled scores: " << wrong.mean.value << "\n";
  EXPECT_TRUE(at::equal(wrong.actual, real.actual)) << "retraining is deterministic";
  EXPECT_LT(wrong.mean.value, 0.5);
}

}  // namespace
}  // namespace magic
