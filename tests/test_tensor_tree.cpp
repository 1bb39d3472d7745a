#include <gtest/gtest.h>

#include "lib/core/tensor_tree.h"

namespace magic {
namespace {

TensorTree sample() {
  TensorTree t;
  t.insert("b", at::tensor({1.0, 2.0}, at::kDouble));
  t.insert("a", at::tensor({3.0, 4.0}, at::kDouble).view({2, 1}));
  return t;
}

TEST(TensorTree, KeepsInsertionOrderAndRejectsDuplicates) {
  TensorTree t = sample();
  EXPECT_EQ(t.names(), (std::vector<std::string>{"b", "a"}));
  EXPECT_THROW(t.insert("a", at::zeros({1})), std::invalid_argument);
  EXPECT_THROW(t.at("missing"), std::out_of_range);
  EXPECT_EQ(t.numel(), 4);
}

TEST(TensorTree, FlattenAndUnflattenRoundTrip) {
  TensorTree t = sample();
  at::Tensor flat = t.flatten();
  EXPECT_TRUE(at::equal(flat, at::tensor({1.0, 2.0, 3.0, 4.0}, at::kDouble)));
  TensorTree back = t.unflatten(flat * 2);
  EXPECT_TRUE(back.same_structure(t));
  EXPECT_TRUE(at::equal(back.at("a"), t.at("a") * 2));
  EXPECT_THROW(t.unflatten(at::zeros({3}, at::kDouble)), std::invalid_argument);
}

TEST(TensorTree, DotNormAddScaleZip) {
  TensorTree t = sample();
  EXPECT_DOUBLE_EQ(dot(t, t).item<double>(), 1 + 4 + 9 + 16);
  EXPECT_DOUBLE_EQ(norm(t).item<double>(), std::sqrt(30.0));
  EXPECT_TRUE(at::equal(add(t, scale(t, 2.0)).at("b"), at::tensor({3.0, 6.0}, at::kDouble)));
  TensorTree other;
  other.insert("a", at::zeros({2, 1}, at::kDouble));
  other.insert("b", at::zeros({2}, at::kDouble));
  EXPECT_THROW(zip(t, other, [](const at::Tensor& x, const at::Tensor&) { return x; }), std::invalid_argument);
}

TEST(TensorTree, RequiresGradMakesFreshLeavesAndDetachCutsTheGraph) {
  TensorTree t = sample().requires_grad();
  for (const auto& e : t) {
    EXPECT_TRUE(e.tensor.requires_grad());
    EXPECT_TRUE(e.tensor.is_leaf());
  }
  TensorTree y = t.map([](const at::Tensor& x) { return x * 3; });
  EXPECT_TRUE(y.at("a").requires_grad());
  EXPECT_FALSE(y.detach().at("a").requires_grad());
  at::Tensor g = torch::autograd::grad({dot(y, y)}, {t.at("b")})[0];
  EXPECT_TRUE(at::allclose(g, 18 * t.at("b").detach()));
}

TEST(TensorTree, PrefixesAndFloatingFilter) {
  TensorTree t = sample();
  t.insert("count", at::scalar_tensor(3, at::kLong));
  EXPECT_EQ(t.floating().size(), 2u);
  TensorTree p = t.with_prefix("opt.");
  EXPECT_TRUE(p.contains("opt.count"));
  EXPECT_EQ(p.strip_prefix("opt.").names(), t.names());
}

}  // namespace
}  // namespace magic
