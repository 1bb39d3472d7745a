// Score agreement measures against values worked by hand.
#include <gtest/gtest.h>

#include "lib/compare/correlation.h"

namespace magic {
namespace {

at::Tensor t(std::vector<double> v) {
  return at::tensor(v, at::kDouble);
}

TEST(Correlation, PearsonOfAWorkedExample) {
  // dx = (-1, 0, 1), dy = (-7/3, -1/3, 8/3): Σ dx dy = 5, Σ dx² = 2, Σ dy² = 38/3, r = 5 / sqrt(76/3).
  EXPECT_NEAR(pearson(t({1, 2, 3}), t({2, 4, 7})), 5.0 / std::sqrt(76.0 / 3.0), 1e-15);
  EXPECT_NEAR(pearson(t({1, 2, 3}), t({3, 2, 1})), -1.0, 1e-15);
}

TEST(Correlation, SpearmanUsesAverageRanksForTies) {
  // One swapped pair among 4: 1 - 6 Σd² / (n (n² - 1)) = 1 - 6·2/60 = 0.8.
  EXPECT_NEAR(spearman(t({1, 2, 3, 4}), t({10, 20, 40, 30})), 0.8, 1e-15);
  EXPECT_TRUE(at::equal(average_ranks(t({1, 2, 2, 3})), t({1, 2.5, 2.5, 4})));
  EXPECT_TRUE(at::equal(average_ranks(t({7, 7, 7})), t({2, 2, 2})));
  EXPECT_NEAR(spearman(t({1, 5, 9, 20}), t({-3, 0, 2, 100})), 1.0, 1e-15);  // monotone: 1 whatever the scale
}

TEST(Correlation, TopKOverlapCountsSharedExamples) {
  EXPECT_EQ(lowest_k_overlap(t({1, 2, 3, 4}), t({2, 1, 4, 3}), 2), 1.0);
  EXPECT_EQ(lowest_k_overlap(t({5, 1, 3, 2}), t({1, 5, 2, 3}), 2), 0.0);
  EXPECT_EQ(highest_k_overlap(t({1, 2, 3, 4}), t({4, 3, 1, 2}), 2), 0.0);
  EXPECT_EQ(highest_k_overlap(t({1, 2, 3, 4}), t({0, 1, 3, 2}), 2), 1.0);
  EXPECT_EQ(lowest_k_overlap(t({1, 2, 3}), t({1, 3, 2}), 2), 0.5);
  EXPECT_THROW(pearson(t({1}), t({1})), std::invalid_argument);
}

}  // namespace
}  // namespace magic
