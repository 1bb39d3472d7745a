// The guard that stops a diverged run names where the first non-finite value appeared: which
// tensor, which entry, how many, NaN or infinity; finite values pass.
#include <gtest/gtest.h>

#include <limits>

#include "lib/train/finite_guard.h"

namespace magic {
namespace {

std::string error_of(const TensorTree& tree) {
  try {
    require_finite(tree, "training step 3");
  } catch (const NonFiniteError& e) {
    return e.what();
  }
  return "";
}

TEST(FiniteGuard, NamesTheStepTheTensorAndTheFirstBadEntry) {
  TensorTree tree;
  tree.insert("gradient of w", at::ones({2, 3}, at::kDouble));
  tree.insert("gradient of b", at::ones({4}, at::kDouble));
  EXPECT_EQ(error_of(tree), "");
  tree.at("gradient of b")[2] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(error_of(tree), "training step 3: gradient of b is not finite (an infinity at [2] of [4]; 1 of 4 entries)");
  tree.at("gradient of w")[1][0] = std::numeric_limits<double>::quiet_NaN();
  tree.at("gradient of w")[1][2] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error_of(tree), "training step 3: gradient of w is not finite (NaN at [1, 0] of [2, 3]; 2 of 6 entries)");
}

}  // namespace
}  // namespace magic
