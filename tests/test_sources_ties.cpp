// The PPGD sources move by the sign of a batch sum that the PPGD pool adds in shards and the
// reference adds at once. A component whose true value is 0 takes its computed sign from the
// summation order; spd_sources_ascent treats it as a tie, so both sides make the same move.
#include <gtest/gtest.h>

#include "lib/model/spd.h"

namespace magic {
namespace {

// Per-example contributions h[b, c]: column 0 cancels exactly in real arithmetic
// (0.1 + 0.7 + 0.3 - 1.1), column 1 is clearly positive, column 2 clearly negative.
at::Tensor contributions() {
  const double d = -((0.1 + 0.7) + 0.3);  // the exact negative of the first three, as summed in order
  return at::tensor({0.1, 0.5, -0.25, 0.7, 0.25, -0.5, 0.3, 0.125, -0.125, d, 0.125, -0.125}, at::kDouble).view({4, 3});
}

TEST(SourcesTies, TheSummationOrderAloneFlipsThePlainSign) {
  const at::Tensor h = contributions();
  const at::Tensor at_once = ((h[0] + h[1]) + h[2]) + h[3];    // one process, row by row
  const at::Tensor in_shards = (h[0] + h[1]) + (h[2] + h[3]);  // two ranks' partial sums, then SUM
  EXPECT_EQ(at_once[0].item<double>(), 0.0);
  EXPECT_GT(in_shards[0].item<double>(), 0.0);  // 1.1e-16: the premise of the bug
  EXPECT_FALSE(at::equal(at_once.sign(), in_shards.sign()));
}

TEST(SourcesTies, TheAscentStepIsTheSameWhicheverOrderAddedTheBatch) {
  const at::Tensor h = contributions();
  const at::Tensor at_once = ((h[0] + h[1]) + h[2]) + h[3];
  const at::Tensor in_shards = (h[0] + h[1]) + (h[2] + h[3]);
  const at::Tensor a = at::full({3}, 0.5, at::kDouble);
  const double eta = 0.05;
  const at::Tensor one = spd_sources_ascent(a, at_once, eta), two = spd_sources_ascent(a, in_shards, eta);
  EXPECT_TRUE(at::equal(one, two)) << one << two;
  // The tie does not move; decided components move by η in the sign's direction, clamped to [0, 1].
  EXPECT_EQ(one[0].item<double>(), 0.5);
  EXPECT_EQ(one[1].item<double>(), 0.5 + eta);
  EXPECT_EQ(one[2].item<double>(), 0.5 - eta);
  EXPECT_EQ(spd_sources_ascent(at::ones({3}, at::kDouble), at_once, eta)[1].item<double>(), 1.0);
}

TEST(SourcesTies, OnlyComponentsNegligibleAgainstTheLargestAreTies) {
  const at::Tensor g = at::tensor({1.0, 1e-8, -1e-8, 1e-10, -1e-10}, at::kDouble);
  const at::Tensor moved = spd_sources_ascent(at::full({5}, 0.5, at::kDouble), g, 0.1) - 0.5;
  EXPECT_TRUE(at::allclose(moved, at::tensor({0.1, 0.1, -0.1, 0.0, 0.0}, at::kDouble), 0, 1e-15)) << moved;
}

}  // namespace
}  // namespace magic
