// Per-token scores: a document's weight multiplies every one of its tokens, so d/dw_doc is the
// sum of d/dw_token over the document (chain rule through the broadcast). Positions whose label
// is ignored (padding) and position 0 (no logit predicts it) never enter the loss.
#include <gtest/gtest.h>

#include "lib/model/lm_loss.h"
#include "lib/train/magic_pipeline.h"
#include "tests/support.h"

namespace magic {
namespace {

TEST(PerTokenScores, SumOverTokensEqualsPerDocumentScore) {
  for (std::string optimizer : {"sgd", "adamw"}) {
    testing::TinyRun run;
    run.optimizer = optimizer;
    run.weights = "per_token";
    const LmProblem per_token = testing::tiny_lm_problem(run);
    run.weights = "per_document";
    const LmProblem per_doc = testing::tiny_lm_problem(run);
    MagicResult t = run_magic(*per_token.step, *per_token.query, per_token.initial, per_token.weights, {});
    MagicResult d = run_magic(*per_doc.step, *per_doc.query, per_doc.initial, per_doc.weights, {});
    ASSERT_EQ(t.scores.dim(), 2);
    EXPECT_LE(testing::relative_error(t.scores.sum(1), d.scores), 1e-10) << optimizer;
  }
}

TEST(PerTokenScores, ExactlyZeroOnPaddingAndOnPositionZero) {
  testing::TinyRun run;
  run.weights = "per_token";
  run.optimizer = "adam";
  run.max_len = 40;  // most fixture chunks are shorter: real padding exists
  const LmProblem problem = testing::tiny_lm_problem(run);
  MagicResult result = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, {});
  const at::Tensor no_label = problem.train->labels.eq(kIgnoreLabel);
  ASSERT_GT(no_label.sum().item<int64_t>(), 0) << "the fixture must contain padding for this test to mean anything";
  EXPECT_TRUE(result.scores.masked_select(no_label).eq(0).all().item<bool>());
  EXPECT_TRUE(result.scores.select(1, 0).eq(0).all().item<bool>());
  // And the real tokens of examples that were trained on are not all zero.
  EXPECT_GT(result.scores.masked_select(no_label.logical_not()).abs().max().item<double>(), 0.0);
}

}  // namespace
}  // namespace magic
