// The learned-too-little criterion (learning_health.h) on made-up figures: each threshold with a
// planted case just on either side, figures a run did not see left unjudged, and the unigram
// entropy and the share of tokens seen once against their values worked by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "lib/train/learning_health.h"

namespace magic {
namespace {

// A run that learned: step 1 at ln 257, the final quarter and the query loss well below H = 3.
LearningFigures learned() {
  LearningFigures f;
  f.unigram_entropy = 3.0;
  f.query_loss = 2.2;
  f.first_loss = 5.55;
  f.final_loss = 1.9;
  f.final_first = 25;
  f.final_last = 32;
  return f;
}

TEST(LearningHealth, ARunWellBelowTheUnigramEntropyLearned) {
  EXPECT_TRUE(judge_learning(learned()).learned());
  EXPECT_FALSE(learned_little_warning(learned()).has_value());
  EXPECT_NE(learning_summary(learned()).find("learned beyond token frequencies"), std::string::npos);
}

TEST(LearningHealth, TheQueryLossIsJudgedAgainstNineTenthsOfTheUnigramEntropy) {
  LearningFigures f = learned();
  f.query_loss = 2.69;  // 0.9 x 3 = 2.7
  EXPECT_TRUE(judge_learning(f).learned());
  f.query_loss = 2.71;
  const LearningVerdict v = judge_learning(f);
  EXPECT_TRUE(v.query_near_unigram);
  EXPECT_FALSE(v.final_near_unigram);
  EXPECT_FALSE(v.barely_trained);
  const std::string warning = learned_little_warning(f).value_or("");
  EXPECT_NE(warning.find("the query loss 2.710 nats a token is above 0.9x the unigram entropy of the training "
                         "tokens, 3.000 (the loss of predicting each token by its frequency alone); step 1's loss was "
                         "5.550; the scores rank examples mostly by how they teach those frequencies"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("train longer (training.steps), at a larger learning rate (optimizer.lr), or a wider model "
                         "(model.d_model)"),
            std::string::npos)
      << warning;
  EXPECT_EQ(warning.find('\n'), std::string::npos);  // one line
}

TEST(LearningHealth, TheFinalTrainingLossIsJudgedAgainstTheSameBound) {
  LearningFigures f = learned();
  f.final_loss = 2.69;
  EXPECT_TRUE(judge_learning(f).learned());
  f.final_loss = 2.71;
  EXPECT_TRUE(judge_learning(f).final_near_unigram);
  f.query_loss = 4.26;  // the run: both above the bound, named together
  const std::string warning = learned_little_warning(f).value_or("");
  EXPECT_EQ(warning.rfind("warning: the model learned little beyond token frequencies: ", 0), 0u) << warning;
  EXPECT_NE(warning.find("the query loss 4.260 and the final training loss 2.710 (mean of steps 25-32) nats a token "
                         "are above 0.9x the unigram entropy"),
            std::string::npos)
      << warning;
}

TEST(LearningHealth, ARunThatBarelyMovedFromStepOneIsNamed) {
  // A pretrained model's losses start below H; a run that hardly trained is seen by its drop alone.
  LearningFigures f = learned();
  f.first_loss = 2.0;
  f.final_loss = 1.95;  // 2.5% below: enough
  EXPECT_TRUE(judge_learning(f).learned());
  f.final_loss = 1.97;  // 1.5% below
  const LearningVerdict v = judge_learning(f);
  EXPECT_TRUE(v.barely_trained);
  EXPECT_FALSE(v.query_near_unigram || v.final_near_unigram);
  f.built_in_model = false;
  const std::string warning = learned_little_warning(f).value_or("");
  EXPECT_NE(warning.find("the final training loss 1.970 (mean of steps 25-32) is less than 2% below step 1's 2.000; "
                         "the scores describe a run that hardly left its initial weights"),
            std::string::npos)
      << warning;
  EXPECT_EQ(warning.rfind("warning: training barely moved the model: ", 0), 0u) << warning;
  EXPECT_EQ(warning.find("model.d_model"), std::string::npos) << warning;  // a model folder's width is its own
  EXPECT_NE(learning_summary(f).find("training barely moved the model"), std::string::npos) << learning_summary(f);
}

TEST(LearningHealth, FiguresARunDidNotSeeAreNotJudged) {
  // Resumed after training: no training step seen; the query loss is still judged.
  LearningFigures f;
  f.unigram_entropy = 3.0;
  f.query_loss = 2.0;
  EXPECT_TRUE(judge_learning(f).learned());
  f.query_loss = 4.0;
  EXPECT_TRUE(judge_learning(f).query_near_unigram);
  EXPECT_EQ(learned_little_warning(f).value_or("").find("step 1"), std::string::npos);
}

TEST(LearningHealth, TheFinalLossIsTheMeanOfTheLastQuarterOfTheWatchedSteps) {
  TrainingTrace trace;
  trace.total_steps = 8;
  for (int64_t t = 0; t < 8; ++t) trace.add(t, 10.0 - t, 1.0, 1.0);
  const std::vector<double> per_token = {5, 4, 3, 3, 3, 3, 2, 1};
  LearningFigures f = learning_figures(trace, per_token, Unigram{3.0, 0}, 2.5);
  EXPECT_EQ(f.first_loss, 5.0);
  EXPECT_EQ(f.final_loss, 1.5);  // steps 7 and 8
  EXPECT_EQ(f.final_first, 7);
  EXPECT_EQ(f.final_last, 8);
  // A run resumed at step 5 did not see step 1; no per-token losses (a summed reduction): none judged.
  TrainingTrace resumed;
  resumed.total_steps = 8;
  for (int64_t t = 4; t < 8; ++t) resumed.add(t, 1.0, 1.0, 1.0);
  f = learning_figures(resumed, {3, 3, 2, 1}, Unigram{3.0, 0}, 2.5);
  EXPECT_FALSE(f.first_loss.has_value());
  EXPECT_EQ(f.final_loss, 1.5);
  f = learning_figures(resumed, {}, Unigram{3.0, 0}, 2.5);
  EXPECT_FALSE(f.first_loss.has_value() || f.final_loss.has_value());
}

TEST(LearningHealth, TheUnigramEntropyCountsTheTargetsOnly) {
  // Position 0 of a row is never a target (7, 0 below) and -100 is padding.
  // Targets 1 1 2 2 and 1 2: three of each, H = ln 2, no kind seen once.
  const at::Tensor even = at::tensor({7, 1, 1, 2, 2, 7, 1, 2, -100, -100}, at::kLong).reshape({2, 5});
  EXPECT_NEAR(unigram_of(even).entropy, std::log(2.0), 1e-15);
  EXPECT_EQ(unigram_of(even).seen_once_share, 0.0);
  // Targets 5 5 5 6 and 5 9: four 5s, one 6, one 9: H = -(2/3 ln 2/3 + 2 (1/6) ln 1/6), 2 of 6 seen once.
  const at::Tensor skewed = at::tensor({0, 5, 5, 5, 6, 0, 5, 9, -100, -100}, at::kLong).reshape({2, 5});
  EXPECT_NEAR(unigram_of(skewed).entropy, -(2.0 / 3 * std::log(2.0 / 3) + 2.0 / 6 * std::log(1.0 / 6)), 1e-15);
  EXPECT_NEAR(unigram_of(skewed).seen_once_share, 2.0 / 6, 1e-15);
  EXPECT_EQ(unigram_of(at::full({2, 3}, -100, at::kLong)).entropy, 0.0);
}

// A large vocabulary on a small data set (a model folder's BPE on a few hundred documents): many
// kinds seen once, H far below a frequency table's loss on new text; not compared.
TEST(LearningHealth, TheUnigramEntropyIsComparedOnlyWhereFewKindsAreSeenOnce) {
  LearningFigures f = learned();
  f.query_loss = 4.26;
  f.seen_once_share = 0.05;
  EXPECT_TRUE(judge_learning(f).query_near_unigram);
  f.seen_once_share = 0.051;
  const LearningVerdict v = judge_learning(f);
  EXPECT_FALSE(v.unigram_judged);
  EXPECT_TRUE(v.learned());
  EXPECT_NE(learning_summary(f).find("(not compared: 5.1% of the tokens are of a kind seen once)"), std::string::npos)
      << learning_summary(f);
  f.final_loss = 5.5;  // step 1's 5.55: the drop is still judged
  EXPECT_TRUE(judge_learning(f).barely_trained);
}

}  // namespace
}  // namespace magic
