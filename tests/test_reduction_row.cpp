// The reduction row (lib/compare/reduction_row.h): a sum in the policy's dtype passes in any order
// of addition, however the terms cancel (the bound is the worst case, not an estimate); a sum
// rounded to bf16 or fp16 (named), one that lost a term, one scaled by a size of the layout, one
// scaled by any other uniform factor (named as a scale, not a rounding), and one whose small
// entries underflowed each fail, saying which.
#include <gtest/gtest.h>

#include "lib/compare/reduction_row.h"
#include "lib/core/precision_policy.h"
#include "lib/core/seed.h"

namespace magic {
namespace {

// R ranks' local gradients: bf16 values (as the compute dtype's backward leaves them) in fp32,
// of mixed signs and magnitudes spread over six decades.
at::Tensor partials(int64_t ranks, int64_t n, uint64_t seed) {
  at::Generator gen = make_generator(seed);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor magnitude = at::pow(10.0, -6.0 * at::rand({ranks, n}, gen, opts));
  return (at::randn({ranks, n}, gen, opts) * magnitude).to(at::kBFloat16).to(at::kFloat);
}

ReductionTerms terms_of(const at::Tensor& p, double c = 1.0) {
  const at::Tensor wide = p.to(at::kDouble);
  return {wide.sum(0) * c, wide.abs().sum(0) * c, p.size(0), c};
}

// Σ_r p_r in fp32, adding the ranks in `order`.
at::Tensor fp32_sum(const at::Tensor& p, const std::vector<int64_t>& order) {
  at::Tensor sum = at::zeros({p.size(1)}, at::kFloat);
  for (int64_t r : order) sum = sum + p[r];
  return sum;
}

CheckRow row(const at::Tensor& reduced, const ReductionTerms& t) {
  return make_reduction_row("grad", "w[reduction]", reduced, t, c10::kFloat, c10::kFloat,
                            candidate_factors({{"dp", 4}, {"fsdp", 2}}));
}

TEST(ReductionRow, AnFp32SumPassesInEveryOrderOfAddition) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const at::Tensor p = partials(4, 2000, seed);
    for (const auto& order : std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}}) {
      const CheckRow r = row(fp32_sum(p, order), terms_of(p));
      EXPECT_TRUE(r.passed) << "seed " << seed << ": " << r.diagnosis.text;
      EXPECT_LE(r.reduction->worst, r.reduction->bound);
    }
  }
  // Pairwise (a tree, as reduce_scatter then all_reduce adds) and with total cancellation.
  const at::Tensor p = partials(4, 2000, 99);
  EXPECT_TRUE(row((p[0] + p[1]) + (p[2] + p[3]), terms_of(p)).passed);
  const at::Tensor cancelling = at::stack({p[0], p[1], -p[0], -p[1]});
  const CheckRow zero = row(fp32_sum(cancelling, {0, 1, 2, 3}), terms_of(cancelling));
  EXPECT_TRUE(zero.passed) << zero.diagnosis.text;
  // The bound: γ_3(2^-24) + 2·2^-24.
  const double u = unit_roundoff(c10::kFloat);
  EXPECT_DOUBLE_EQ(zero.reduction->bound, 3 * u / (1 - 3 * u) + 2 * u);
}

TEST(ReductionRow, ASumRoundedToACoarserDtypeFailsNamingIt) {
  const at::Tensor p = partials(4, 2000, 1);
  const at::Tensor sum = fp32_sum(p, {0, 1, 2, 3});
  for (auto [dtype, name] : {std::pair{c10::kBFloat16, "bf16"}, std::pair{c10::kHalf, "fp16"}}) {
    const CheckRow r = row(sum.to(dtype).to(at::kFloat), terms_of(p));
    EXPECT_FALSE(r.passed) << name;
    EXPECT_GT(r.reduction->entries_over, 1000) << name;
    EXPECT_NE(r.diagnosis.text.find(std::string("it was rounded to ") + name), std::string::npos) << r.diagnosis.text;
  }
  // Rounded to fp16 after a divide by a non-power of two (a predivide): off, but fits nothing.
  const CheckRow predivided = row((sum / 3).to(at::kHalf).to(at::kFloat) * 3, terms_of(p));
  EXPECT_FALSE(predivided.passed);
  EXPECT_NE(predivided.diagnosis.text.find("median error"), std::string::npos) << predivided.diagnosis.text;
}

TEST(ReductionRow, AMissingTermAScaledSumAndUnderflowFail) {
  const at::Tensor p = partials(4, 2000, 2);
  const ReductionTerms t = terms_of(p);
  EXPECT_FALSE(row(fp32_sum(p, {0, 1, 2}), t).passed);
  const CheckRow halved = row(fp32_sum(p, {0, 1, 2, 3}) / 2, t);
  EXPECT_FALSE(halved.passed);
  EXPECT_EQ(halved.diagnosis.factor, "1/fsdp") << halved.diagnosis.text;
  // Entries below 1e-5 flushed to zero: the few that matter fail, each far beyond the bound.
  const at::Tensor sum = fp32_sum(p, {0, 1, 2, 3});
  const CheckRow flushed = row(at::where(sum.abs() < 1e-5, at::zeros_like(sum), sum), t);
  EXPECT_FALSE(flushed.passed);
  EXPECT_GT(flushed.reduction->worst, 0.5);
  // The convention's factor c is part of the exact sum: /S·R under AVG passes as such.
  const double c = 1.0 / (1024.0 * 4.0);
  EXPECT_TRUE(row(fp32_sum(p, {0, 1, 2, 3}) * static_cast<float>(c), terms_of(p, c)).passed);
}

// g = k·Σx for one k (a wrong normalizer, an extra x2): its cosine is 1 and every entry is k times
// the sum within the bound, so it is named as a scale (a topology factor when one is k), never
// as "summed coarser" or a rounding, though a doubled sum of bf16 values fits bf16 as well.
TEST(ReductionRow, AUniformScaleIsNamedAsAScaleNotARounding) {
  const at::Tensor p = partials(4, 2000, 3);
  const ReductionTerms t = terms_of(p);
  const at::Tensor sum = fp32_sum(p, {0, 1, 2, 3});
  const auto dp4 = candidate_factors({{"dp", 4}});  // 4 and 1/4: no factor is 2 or 3
  auto row_on = [&](const at::Tensor& reduced, const std::vector<NamedFactor>& factors) {
    return make_reduction_row("grad", "w[reduction]", reduced, t, c10::kFloat, c10::kFloat, factors);
  };
  for (auto [k, text] : {std::pair{2.0f, "uniform scale 2.000 of the exact sum"},
                         std::pair{3.0f, "uniform scale 3.000 of the exact sum"},
                         std::pair{0.5f, "uniform scale 0.500 of the exact sum"}}) {
    const CheckRow r = row_on(sum * k, dp4);
    EXPECT_FALSE(r.passed) << k;
    EXPECT_EQ(r.diagnosis.text.rfind(text, 0), 0u) << r.diagnosis.text;
    EXPECT_EQ(r.diagnosis.text.find("coarser"), std::string::npos) << r.diagnosis.text;
    EXPECT_TRUE(r.diagnosis.factor.empty()) << r.diagnosis.text;
  }
  // A factor of the layout is named as such.
  const CheckRow dp2 = row_on(sum * 2.0f, candidate_factors({{"dp", 2}}));
  EXPECT_EQ(dp2.diagnosis.factor, "x dp") << dp2.diagnosis.text;
  // Every rank's term the same bf16 value: the sum and its double both fit bf16. Doubled, it is a
  // scale; with half its entries' signs flipped, it fits bf16 but is no rounding of the sum.
  const at::Tensor same = at::stack({p[0], p[0], p[0], p[0]});
  const at::Tensor same_sum = fp32_sum(same, {0, 1, 2, 3});
  const CheckRow doubled =
      make_reduction_row("grad", "w[reduction]", same_sum * 2.0f, terms_of(same), c10::kFloat, c10::kFloat, dp4);
  EXPECT_EQ(doubled.diagnosis.text.rfind("uniform scale 2.000", 0), 0u) << doubled.diagnosis.text;
  const at::Tensor flipped = at::where(at::arange(2000) % 2 == 0, same_sum, -same_sum);
  const CheckRow scrambled =
      make_reduction_row("grad", "w[reduction]", flipped, terms_of(same), c10::kFloat, c10::kFloat, dp4);
  EXPECT_FALSE(scrambled.passed);
  EXPECT_EQ(scrambled.diagnosis.text.find("rounded"), std::string::npos) << scrambled.diagnosis.text;
  EXPECT_NE(scrambled.diagnosis.text.find("median error"), std::string::npos) << scrambled.diagnosis.text;
}

}  // namespace
}  // namespace magic
