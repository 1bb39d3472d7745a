// TrainState's pure functions (lib/step/train_state.h): packed.
#include <gtest/gtest.h>

#include "lib/step/train_state.h"

namespace magic {
namespace {

TrainState state_of(at::ScalarType opt_dtype) {
  TrainState s;
  s.params.insert("a", at::arange(6, at::kDouble).view({2, 3}));
  s.params.insert("b", at::arange(4, at::kDouble) + 10.0);
  s.opt.insert("m.a", at::arange(6, at::kDouble).view({2, 3}).t().to(opt_dtype));  // not contiguous
  return s;
}

TEST(TrainStatePacked, HoldsTheSameValuesInOneBuffer) {
  const TrainState s = state_of(at::kDouble);
  const TrainState p = packed(s);
  const std::vector<at::Tensor> before = floating_leaves(s), after = floating_leaves(p);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(at::equal(before[i], after[i])) << i;
    EXPECT_EQ(before[i].sizes(), after[i].sizes()) << i;
    EXPECT_TRUE(after[i].storage().is_alias_of(after[0].storage())) << i;
  }
  EXPECT_EQ(after[0].storage().nbytes(), static_cast<size_t>(state_bytes(s)));
  EXPECT_EQ(p.opt.names(), s.opt.names());
}

TEST(TrainStatePacked, LeavesMixedDtypesAsTheyAre) {
  const TrainState s = state_of(at::kFloat);
  const TrainState p = packed(s);
  EXPECT_TRUE(p.params.at("a").is_same(s.params.at("a")));
  EXPECT_TRUE(p.opt.at("m.a").is_same(s.opt.at("m.a")));
  EXPECT_TRUE(packed(TrainState{}).params.empty());
}

}  // namespace
}  // namespace magic
