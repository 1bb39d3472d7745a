// The weighted causal-LM loss against values written out by hand from its definition.
#include <gtest/gtest.h>

#include <cmath>

#include "lib/core/error.h"
#include "lib/model/lm_loss.h"

namespace magic {
namespace {

// Two rows of length 3 over a vocabulary of 2. Logits are zero except one, so each token loss
// is log(2) or log(1 + e) - 1 / log(1 + e), written out below.
struct Fixture {
  at::Tensor logits = at::zeros({2, 3, 2}, at::kDouble);
  at::Tensor labels = at::tensor(std::vector<int64_t>{0, 1, 0, 1, 0, kIgnoreLabel}, at::kLong).view({2, 3});
  Fixture() { logits[0][0][1] = 1.0; }
};

TEST(LmLoss, NextTokenLossesShiftByOneAndIgnoreMaskedLabels) {
  Fixture f;
  at::Tensor l = next_token_losses(f.logits, f.labels);
  ASSERT_EQ(l.sizes(), (std::vector<int64_t>{2, 2}));
  // Row 0, position 0 predicts label 1 with logits (0, 1): -log(e / (1 + e)).
  EXPECT_NEAR(l[0][0].item<double>(), std::log(1 + std::exp(1.0)) - 1.0, 1e-15);
  EXPECT_NEAR(l[0][1].item<double>(), std::log(2.0), 1e-15);
  EXPECT_NEAR(l[1][0].item<double>(), std::log(2.0), 1e-15);
  EXPECT_EQ(l[1][1].item<double>(), 0.0);  // label -100
}

TEST(LmLoss, ReductionsByHand) {
  Fixture f;
  at::Tensor l = next_token_losses(f.logits, f.labels);
  at::Tensor mask = label_mask(f.labels, at::kDouble);
  const double a = std::log(1 + std::exp(1.0)) - 1.0, b = std::log(2.0);
  at::Tensor w = at::tensor({2.0, 0.5}, at::kDouble);
  // mean: (2a + 2b + 0.5b) / 3 valid labels
  EXPECT_NEAR(reduce_weighted_loss(l, mask, w, Reduction::kMean, 3.0).item<double>(), (2 * a + 2.5 * b) / 3, 1e-15);
  // sum_of_means: 2(a + b)/2 + 0.5 b / 1
  EXPECT_NEAR(reduce_weighted_loss(l, mask, w, Reduction::kSumOfMeans, 0).item<double>(), (a + b) + 0.5 * b, 1e-15);
  EXPECT_NEAR(reduce_weighted_loss(l, mask, w, Reduction::kSum, 0).item<double>(), 2 * a + 2.5 * b, 1e-15);
  // The mean denominator is the caller's: the weights never change it.
  EXPECT_NEAR(reduce_weighted_loss(l, mask, w * 3, Reduction::kMean, 3.0).item<double>(), (2 * a + 2.5 * b), 1e-14);
}

TEST(LmLoss, PerTokenWeightsApplyToTheTokenWhoseLabelIsPredicted) {
  Fixture f;
  at::Tensor l = next_token_losses(f.logits, f.labels);
  at::Tensor mask = label_mask(f.labels, at::kDouble);
  at::Tensor w = at::ones({2, 3}, at::kDouble);
  w[0][1] = 5.0;  // weighs label 1 of row 0, predicted from position 0: loss a
  w[0][0] = 9.0;  // position 0 has no predicting logit: no effect
  const double a = std::log(1 + std::exp(1.0)) - 1.0, b = std::log(2.0);
  EXPECT_NEAR(reduce_weighted_loss(l, mask, w, Reduction::kSum, 0).item<double>(), 5 * a + 2 * b, 1e-15);
}

TEST(LmLoss, IgnoredPositionsHaveExactlyZeroGradients) {
  Fixture f;
  at::Tensor logits = f.logits.clone().requires_grad_(true);
  at::Tensor w = at::ones({2, 3}, at::kDouble).requires_grad_(true);
  at::Tensor l = next_token_losses(logits, f.labels);
  at::Tensor loss = reduce_weighted_loss(l, label_mask(f.labels, at::kDouble), w, Reduction::kSum, 0);
  auto g = torch::autograd::grad({loss}, {logits, w}, {}, true, true);
  EXPECT_TRUE(g[0][1][1].eq(0).all().item<bool>());  // predicts the ignored label
  EXPECT_TRUE(g[0][0][2].eq(0).all().item<bool>());  // the last position predicts nothing
  EXPECT_EQ(g[1][1][2].item<double>(), 0.0);
  EXPECT_EQ(g[1][0][0].item<double>(), 0.0);
}

// Label smoothing by hand: with logits (0, 1) over V = 2, -log p_1 = a and -log p_0 = a + 1, so the
// smoothed loss on label 1 is (1-ε)a + (ε/2)(a + a + 1) = a + ε/2; on label 0 it is a + 1 - ε/2.
// Uniform logits give log 2 whatever ε is; an ignored label gives 0.
TEST(LmLoss, LabelSmoothingByHand) {
  Fixture f;
  const double a = std::log(1 + std::exp(1.0)) - 1.0, eps = 0.3;
  at::Tensor l = next_token_losses(f.logits, f.labels, TokenLoss{2, eps});
  EXPECT_NEAR(l[0][0].item<double>(), a + eps / 2, 1e-15);
  EXPECT_NEAR(l[0][1].item<double>(), std::log(2.0), 1e-15);
  EXPECT_NEAR(l[1][0].item<double>(), std::log(2.0), 1e-15);
  EXPECT_EQ(l[1][1].item<double>(), 0.0);
  at::Tensor targets = at::tensor(std::vector<int64_t>{0}, at::kLong).view({1, 1});
  EXPECT_NEAR(position_losses(f.logits[0].narrow(0, 0, 1).unsqueeze(0), targets, TokenLoss{2, eps}).item<double>(),
              a + 1 - eps / 2, 1e-15);
}

TEST(LmLoss, ParseRejectsUnknownReductions) {
  EXPECT_EQ(parse_reduction("sum_of_means"), Reduction::kSumOfMeans);
  EXPECT_THROW(parse_reduction("avg"), InputError);
}

}  // namespace
}  // namespace magic
