// The comparison statistics and the scale diagnosis on planted errors: a pure scaling by a
// topology factor is named exactly, a nearby scale is named as ≈, other errors are described.
#include <gtest/gtest.h>

#include "lib/compare/check_row.h"
#include "lib/core/seed.h"

namespace magic {
namespace {

at::Tensor reference_tensor() {
  auto gen = make_generator(11);
  return at::randn({200}, gen, at::TensorOptions().dtype(at::kDouble));
}

std::vector<NamedFactor> factors() {
  return candidate_factors({{"n_ci", 4}, {"n_per_block", 2}, {"dp", 1}});
}

TEST(Compare, IdenticalTensorsGiveTheHealthyFigures) {
  at::Tensor r = reference_tensor();
  auto s = compare_tensors(r.clone(), r);
  EXPECT_EQ(s.scale, 1.0);
  EXPECT_EQ(s.mean_ratio, 1.0);
  EXPECT_EQ(s.worst_rel_err, 0.0);
  EXPECT_NEAR(s.cosine, 1.0, 1e-15);
}

TEST(Compare, FiguresOfAKnownError) {
  at::Tensor r = at::tensor({1.0, -2.0, 4.0}, at::kDouble);
  at::Tensor d = at::tensor({1.0, -2.0, 5.0}, at::kDouble);
  auto s = compare_tensors(d, r);
  EXPECT_DOUBLE_EQ(s.scale, (1 + 4 + 20) / 21.0);  // <d,r>/<r,r>
  EXPECT_DOUBLE_EQ(s.mean_ratio, (1 + 1 + 1.25) / 3);
  EXPECT_DOUBLE_EQ(s.worst_rel_err, 1.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.cosine, 25.0 / std::sqrt(21.0 * 30.0));
}

TEST(Compare, MeanRatioIgnoresEntriesBelowTheFloor) {
  at::Tensor r = at::tensor({1.0, 1e-9}, at::kDouble);
  at::Tensor d = at::tensor({1.0, 5e-9}, at::kDouble);  // the tiny entry is off 5x, below 1e-3 max|r|
  EXPECT_EQ(compare_tensors(d, r).mean_ratio, 1.0);
}

TEST(Diagnosis, NamesExactTopologyFactors) {
  at::Tensor r = reference_tensor();
  for (auto [factor, name] : std::vector<std::pair<double, std::string>>{{0.25, "1/n_ci"},
                                                                         {4.0, "x n_ci"},
                                                                         {2.0, "x n_per_block"},
                                                                         {0.5, "1/n_per_block"},
                                                                         {8.0, "x n_ci*n_per_block"}}) {
    CheckRow row = make_check_row("grad", "w", r * factor, r, 1e-9, factors());
    EXPECT_FALSE(row.passed);
    EXPECT_EQ(row.diagnosis.factor, name) << factor;
    EXPECT_TRUE(row.diagnosis.exact);
  }
}

TEST(Diagnosis, ApproximateScalesAndOtherErrors) {
  at::Tensor r = reference_tensor();
  auto gen = make_generator(12);
  at::Tensor noise = at::randn({200}, gen, at::TensorOptions().dtype(at::kDouble));
  CheckRow near = make_check_row("grad", "w", 3.6 * r + 0.4 * noise, r, 1e-9, factors());
  EXPECT_EQ(near.diagnosis.factor, "x n_ci");
  EXPECT_FALSE(near.diagnosis.exact);
  EXPECT_EQ(near.diagnosis.text.rfind("≈ x n_ci", 0), 0u) << near.diagnosis.text;
  CheckRow odd = make_check_row("grad", "w", 1.37 * r, r, 1e-9, factors());
  EXPECT_EQ(odd.diagnosis.factor, "");
  EXPECT_NE(odd.diagnosis.text.find("no topology factor"), std::string::npos);
  CheckRow zero = make_check_row("hvp", "theta_0", at::zeros_like(r), r, 1e-9, factors());
  EXPECT_EQ(zero.diagnosis.text, "distributed tensor is zero");
  CheckRow scrambled = make_check_row("scores", "x", r.flip(0), r, 1e-9, factors());
  EXPECT_NE(scrambled.diagnosis.text.find("direction differs"), std::string::npos);
}

TEST(Diagnosis, PassingRowsAtTheToleranceHaveNoDiagnosis) {
  at::Tensor r = reference_tensor();
  CheckRow ok = make_check_row("grad", "w", r * (1 + 1e-12), r, 1e-9, factors());
  EXPECT_TRUE(ok.passed);
  EXPECT_EQ(ok.diagnosis.text, "");
  CheckRow bad = make_check_row("grad", "w", r * (1 + 1e-8), r, 1e-9, factors());
  EXPECT_FALSE(bad.passed);
}

}  // namespace
}  // namespace magic
