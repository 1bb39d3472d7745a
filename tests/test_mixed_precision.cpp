// The precision policy as the step applies it: the loss scale is exact, master weights keep the
// update, bf16 travels over Gloo; and the three-tensor row's verdicts, each with the planted
// error it must fail on.
#include <gtest/gtest.h>

#include "lib/compare/check_row.h"
#include "lib/core/seed.h"
#include "lib/distributed/runtime/runtime.h"
#include "tests/support.h"

namespace magic {
namespace {

LmProblem problem_with(const PrecisionPolicy& policy, const std::string& optimizer = "sgd") {
  testing::TinyRun run;
  run.optimizer = optimizer;
  RunConfig config = testing::tiny_run_config(run);
  config.precision = policy;
  return build_lm_problem(config);
}

TensorTree step0_gradient(const LmProblem& p) {
  return p.step->gradient(TrainState{p.initial.params.requires_grad(), p.initial.opt, {}}, 0, p.weights, false)
      .detach();
}

TEST(MixedPrecision, ThePowerOfTwoLossScaleIsExactWhereNothingUnderflows) {
  // bf16 has fp32's exponent range: S·L's backward is S times L's, bit for bit, and g/S undoes it.
  PrecisionPolicy scaled = PrecisionPolicy::for_compute(c10::kBFloat16);
  scaled.loss_scale = 1024;
  const TensorTree a = step0_gradient(problem_with(PrecisionPolicy::for_compute(c10::kBFloat16)));
  const TensorTree b = step0_gradient(problem_with(scaled));
  for (const auto& e : a) EXPECT_TRUE(at::equal(e.tensor, b.at(e.name))) << e.name;
  // ... and the gradient really is computed in bf16 (it differs from fp32's).
  const TensorTree fp32 = step0_gradient(problem_with(PrecisionPolicy::for_compute(c10::kFloat)));
  EXPECT_FALSE(at::equal(a.at("head.weight"), fp32.at("head.weight")));
}

TEST(MixedPrecision, MasterWeightsKeepUpdatesTheComputeDtypeCannotHold) {
  const LmProblem p = problem_with(PrecisionPolicy::for_compute(c10::kBFloat16), "adam");
  const StepOutput out = p.step->step(p.initial, 0, p.weights, false);
  const at::Tensor w = out.next.params.at("blocks.0.ln1.weight");
  EXPECT_EQ(w.scalar_type(), c10::kFloat);
  EXPECT_EQ(out.next.opt.at("mu.blocks.0.ln1.weight").scalar_type(), c10::kFloat);
  // Adam's first step moves the gains (1) by about lr = 0.01 to values like 0.99, between bf16's
  // neighbours 0.98828125 and 0.9921875: the fp32 master copy holds them, bf16 could not.
  EXPECT_FALSE(at::equal(w, w.to(c10::kBFloat16).to(c10::kFloat)));
}

TEST(MixedPrecision, Bf16TravelsOverGlooAsFp32AndIsRoundedOnceAfterTheSum) {
  const at::Tensor a = at::tensor({1.0, 1.0 / 3, 1e-3}, at::kFloat).to(at::kBFloat16),
                   b = at::tensor({1.0 / 256, 2.0 / 3, -1e-3}, at::kFloat).to(at::kBFloat16);
  const at::Tensor expected = (a.to(at::kFloat) + b.to(at::kFloat)).to(at::kBFloat16);
  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    const at::Tensor mine = rt.rank() == 0 ? a : b;
    const at::Tensor sum = rt.world()->sum(mine);
    EXPECT_EQ(sum.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(sum, expected));
    EXPECT_TRUE(at::equal(rt.world()->all_gather(mine, 0), at::cat({a, b})));
  });
}

// G: golden; R = G + e (the policy's own error); D: the candidate.
struct ThreeTensors {
  at::Tensor golden, reference;
};

ThreeTensors three_tensors() {
  at::Generator gen = make_generator(7);
  const at::Tensor g = at::randn({400}, gen, at::TensorOptions().dtype(at::kDouble));
  return {g, g + 0.01 * at::randn({400}, gen, at::TensorOptions().dtype(at::kDouble))};
}

CheckRow row_for(const at::Tensor& candidate, const ThreeTensors& t, std::optional<double> bound, double k = 2.0) {
  PrecisionCriterion criterion;
  criterion.k = k;
  criterion.floor = 1e-3;
  criterion.bound = bound;
  return make_precision_row("grad", "w", candidate, t.reference, t.golden, criterion, candidate_factors({{"dp", 4}}),
                            0.0, 1e-4);
}

TEST(PrecisionRow, PassesANoisyCandidateAndFailsEachPlantedError) {
  const ThreeTensors t = three_tensors();
  at::Generator gen = make_generator(8);
  const at::Tensor noise = 0.002 * at::randn({400}, gen, at::TensorOptions().dtype(at::kDouble));
  const CheckRow clean = row_for(t.reference + noise, t, 0.05);
  EXPECT_TRUE(clean.passed) << clean.diagnosis.text;
  ASSERT_TRUE(clean.precision.has_value());
  EXPECT_NEAR(clean.precision->allowed_golden, 2.0 * clean.precision->reference_golden + 1e-3, 1e-15);

  // A factor: fails both conditions and is named.
  const CheckRow scaled = row_for(4.0 * t.reference, t, 0.05);
  EXPECT_FALSE(scaled.passed);
  EXPECT_EQ(scaled.diagnosis.factor, "x dp") << scaled.diagnosis.text;

  // Twice the policy's own error against fp64 in a new direction: fails the k condition.
  const CheckRow drifted = row_for(t.golden + 3.0 * (t.reference - t.golden).roll(1), t, std::nullopt);
  EXPECT_FALSE(drifted.passed);
  EXPECT_NE(drifted.diagnosis.text.find("error vs fp64"), std::string::npos) << drifted.diagnosis.text;

  // Within k of fp64 but farther than the bound from R: fails the bound, which says so (R within a
  // quarter of the bound of fp64, so the bound applies).
  const at::Tensor far = t.golden - 5.0 * (t.reference - t.golden);
  const CheckRow loose = row_for(far, t, 0.05, 8.0);
  ASSERT_TRUE(loose.precision->bound.has_value());
  EXPECT_LE(loose.precision->candidate_golden, loose.precision->allowed_golden);
  EXPECT_FALSE(loose.passed);
  EXPECT_NE(loose.diagnosis.text.find("error vs the policy's reference"), std::string::npos) << loose.diagnosis.text;
  // Without a bound (a row downstream of training) the same candidate passes.
  EXPECT_TRUE(row_for(far, t, std::nullopt, 8.0).passed);
  // Nor does a bound apply where R itself is more than a quarter of it off fp64: R shows the
  // cancellation the bound assumes away (the k condition alone judges).
  const CheckRow conditioned = row_for(far, t, 0.01, 8.0);
  EXPECT_FALSE(conditioned.precision->bound.has_value());
  EXPECT_TRUE(conditioned.passed) << conditioned.diagnosis.text;
}

TEST(PrecisionRow, ValuesAreNotJudgedWhereThePolicysOwnResultCarriesNoSignal) {
  const ThreeTensors t = three_tensors();
  PrecisionCriterion criterion;
  criterion.k = 8.0;
  criterion.informative_below = 0.1;
  auto row = [&](const at::Tensor& reference, const at::Tensor& candidate) {
    return make_precision_row("scores", "per_token", candidate, reference, t.golden, criterion, {}, 0.0, 1e-4);
  };
  // R within 10% of fp64: a candidate 20 times farther fails.
  EXPECT_FALSE(row(t.reference, t.golden + 20.0 * (t.reference - t.golden)).passed);
  // R itself 100% off: nothing to judge D by; the row passes and says why.
  const at::Tensor noise = t.golden.roll(7);
  const CheckRow unjudged = row(noise, t.golden + 20.0 * (noise - t.golden));
  EXPECT_TRUE(unjudged.passed);
  EXPECT_FALSE(unjudged.precision->values_judged);
  EXPECT_NE(unjudged.diagnosis.text.find("not judged by value"), std::string::npos) << unjudged.diagnosis.text;
}

// A factor bug fails a judged row even within its floor (bf16's for scores, u·√n = 0.42, lets 1/2
// through by value): D against R pointing the same way, scaled by a size of the layout.
TEST(PrecisionRow, AScaleThatATopologyFactorExplainsFailsWhateverTheNoise) {
  const ThreeTensors t = three_tensors();
  at::Generator gen = make_generator(9);
  const at::Tensor noise = 0.3 * at::randn({400}, gen, at::TensorOptions().dtype(at::kDouble));
  PrecisionCriterion criterion;
  criterion.k = 8.0;
  criterion.floor = 0.8;  // as wide as bf16's for scores: 1/dp is within it by value
  const auto factors = candidate_factors({{"dp", 4}});
  auto row = [&](const at::Tensor& candidate, std::optional<double> informative_below = std::nullopt) {
    criterion.informative_below = informative_below;
    return make_precision_row("scores", "per_token", candidate, t.reference, t.golden, criterion, factors, 0.0, 1e-4);
  };
  const CheckRow noisy = row(t.reference + noise);  // 30% noise, no scaling
  EXPECT_TRUE(noisy.passed) << noisy.diagnosis.text;
  const CheckRow divided = row(0.25 * (t.reference + noise));
  EXPECT_LE(divided.precision->candidate_golden, divided.precision->allowed_golden) << "within the floor";
  EXPECT_FALSE(divided.passed);
  EXPECT_EQ(divided.diagnosis.factor, "1/dp") << divided.diagnosis.text;
  // A length off by 20% under the row's noise: no size of this layout, not a factor bug. (Exactly
  // 1.2 times R, with no noise, is an exact scale and fails: test_precision_gate.cpp.)
  EXPECT_TRUE(row(1.2 * (t.reference + noise)).passed);
  // Where R carries no signal (values not judged) a length ratio proves nothing.
  const CheckRow unjudged = row(0.25 * (t.reference + noise), 0.001);
  EXPECT_FALSE(unjudged.precision->values_judged);
  EXPECT_TRUE(unjudged.passed) << unjudged.diagnosis.text;
}

// Where R itself is far off fp64 (its length is no signal for a ≈ reading), an exact factor still
// fails: D off R by 1/dp to 1% with the direction kept, which rounding cannot do (extra-divide-
// scores in bf16 on an AVX2 EPYC: w[vjp] at D/R 0.500003, R 62% off fp64). A single entry has no
// direction to keep, and an inexact 1/dp on a noisy R stays a pass.
TEST(PrecisionRow, AnExactFactorFailsEvenWhereTheReferenceIsFarOffFp64) {
  const ThreeTensors t = three_tensors();
  at::Generator gen = make_generator(10);
  const at::Tensor far = t.golden + 0.6 * t.golden.abs().max() * at::randn({400}, gen, at::kDouble);
  PrecisionCriterion criterion;
  criterion.k = 4.0;
  criterion.floor = 0.1;
  const auto factors = candidate_factors({{"dp", 2}});
  auto row = [&](const at::Tensor& candidate, const at::Tensor& reference, const at::Tensor& golden) {
    return make_precision_row("replay", "w[vjp]", candidate, reference, golden, criterion, factors, 0.0, 0.02);
  };
  const CheckRow halved = row(0.5 * far, far, t.golden);
  ASSERT_GT(halved.precision->reference_golden, 0.1) << "R carries no length signal by the 10% rule";
  EXPECT_LE(halved.precision->candidate_golden, halved.precision->allowed_golden) << "within the allowance";
  EXPECT_FALSE(halved.passed);
  EXPECT_EQ(halved.diagnosis.factor, "1/dp") << halved.diagnosis.text;
  // 0.5 with 3% noise on top: a ≈ reading, not exact; R's length proves nothing, so it passes.
  const at::Tensor tilted = 0.5 * far + 0.03 * far.abs().max() * at::randn({400}, gen, at::kDouble);
  EXPECT_TRUE(row(tilted, far, t.golden).passed) << row(tilted, far, t.golden).diagnosis.text;
  // One entry: always "pointing the same way", so no exact claim.
  const at::Tensor one = far.slice(0, 0, 1);
  EXPECT_TRUE(row(0.5 * one, one, t.golden.slice(0, 0, 1)).passed);
}

// A row not judged by value (noise-dominated below fp32) still fails where D is grossly off fp64:
// correct runs stay within 99 times fp64's size, a bug by the fp16 loss scale lands near 1000
// (REPLAY's optimizer-state cotangents left multiplied by S passed every row before this rule).
// Where R is as far off as D (both noise), no gross error is claimed.
TEST(PrecisionRow, ARowNotJudgedByValueStillFailsAGrossError) {
  const ThreeTensors t = three_tensors();
  PrecisionCriterion criterion;
  criterion.judge_values = false;
  auto row = [&](const at::Tensor& candidate) {
    return make_precision_row("replay", "opt.mu[step]", candidate, t.reference, t.golden, criterion,
                              candidate_factors({{"loss_scale", 1024}}), 0.0, 1e-4);
  };
  const CheckRow noisy = row(19.0 * t.golden.roll(3));  // as far off as correct runs have been
  EXPECT_TRUE(noisy.passed) << noisy.diagnosis.text;
  EXPECT_FALSE(noisy.precision->values_judged);
  const CheckRow scaled = row(1024.0 * t.reference);
  EXPECT_FALSE(scaled.passed);
  EXPECT_NE(scaled.diagnosis.text.find("not judged by value, but"), std::string::npos) << scaled.diagnosis.text;
  EXPECT_EQ(scaled.diagnosis.factor, "x loss_scale") << scaled.diagnosis.text;
  const CheckRow both_noise = make_precision_row("scores", "per_token", 300.0 * t.golden.roll(5),
                                                 5.0 * t.golden.roll(9), t.golden, criterion, {}, 0.0, 1e-4);
  EXPECT_TRUE(both_noise.passed) << both_noise.diagnosis.text;
}

// A row near zero against its error scale (a document whose token scores cancel): D = R/2 is then
// closer to R than R is to fp64, and the length ratio is noise; so is any ratio where R is more
// than 10% off fp64 in its own length; the same halving of a row that stands out of its error
// scale fails (the property run that found it: dp=1,cp=2 bf16 sgd batch 1).
TEST(PrecisionRow, ALengthRatioBelowThePolicysOwnErrorIsNotAFactor) {
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor golden = at::tensor({1e-3, -2e-3, 0.0, 5e-4}, options);
  const at::Tensor reference = golden + at::tensor({3e-3, 1e-3, -2e-3, 0.0}, options);
  PrecisionCriterion criterion;
  criterion.k = 8.0;
  criterion.floor = 0.8;
  const double error_scale = 1.0;  // the row's tokens: far larger than its sum
  auto row = [&](const at::Tensor& candidate, const at::Tensor& r, const at::Tensor& g) {
    return make_precision_row("scores", "per_document", candidate, r, g, criterion, candidate_factors({{"cp", 2}}),
                              error_scale, 1e-4);
  };
  const CheckRow small = row(0.5 * reference, reference, golden);
  EXPECT_LT(small.stats.worst_rel_err, small.precision->reference_golden);
  EXPECT_TRUE(small.passed) << small.diagnosis.text;
  // D exactly 2R, farther from R than R is from fp64 in the error scale's units, but R is 50% off
  // fp64 in its own length: two noise residues (the fp32 pass of dp=1,tp=2 fp16 adamw seed 15227
  // batch 1 read x tp).
  const at::Tensor noisy = at::tensor({2e-3, -1e-3, 1e-3, 1e-3}, options);
  const CheckRow doubled = row(2.0 * noisy, noisy, golden);
  EXPECT_GT(doubled.stats.worst_rel_err, doubled.precision->reference_golden);
  EXPECT_TRUE(doubled.passed) << doubled.diagnosis.text;
  const at::Tensor large = at::tensor({0.5, -0.3, 0.2, 0.4}, options);
  const CheckRow halved = row(0.5 * (large + reference), large + reference, large + golden);
  EXPECT_FALSE(halved.passed);
  EXPECT_EQ(halved.diagnosis.factor, "1/cp") << halved.diagnosis.text;
}

// The factor rule wants R to carry the factor's length: err(R, G) <= 0.1·|log2 f|. With R 20% off
// fp64 a stretch by 2 is noise (it passes), a stretch by the loss scale 16 is not (it fails as
// x loss_scale), on a row not judged by value whose factors are (a row at θ_N under Adam: the
// layer-norm [start] rows of dp=2 bf16 are 11-22% off fp64); a row whose factors are not judged
// either lets the same stretch through (it is far below the gross rule).
TEST(PrecisionRow, AFactorFarFromOneNeedsLessSignalThanAFactorOfTwo) {
  at::Generator gen = make_generator(11);
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor golden = at::randn({64}, gen, options);
  const at::Tensor noise = at::randn({64}, gen, options);
  const at::Tensor reference = golden + 0.2 * at::abs(golden).max() * noise / at::abs(noise).max();
  const at::Tensor tilted = reference + 0.05 * reference.roll(3);  // no exact scale: the ratio varies by ~5%
  PrecisionCriterion criterion;
  criterion.k = 8.0;
  criterion.floor = 0.1;
  criterion.judge_values = false;
  criterion.judge_factors = true;
  auto row = [&](const at::Tensor& candidate, const PrecisionCriterion& c) {
    return make_precision_row("replay", "ln_f.weight[start]", candidate, reference, golden, c,
                              candidate_factors({{"tp", 2}, {"loss_scale", 16}}), 0.0, 1e-4);
  };
  const CheckRow doubled = row(2.0 * tilted, criterion);
  ASSERT_GT(doubled.precision->reference_golden, 0.1);
  ASSERT_LT(doubled.precision->reference_golden, 0.4);
  EXPECT_FALSE(is_exact_scale(doubled.stats));
  EXPECT_TRUE(doubled.passed) << doubled.diagnosis.text;
  const CheckRow scaled = row(16.0 * tilted, criterion);
  EXPECT_FALSE(is_exact_scale(scaled.stats));
  EXPECT_FALSE(scaled.passed);
  EXPECT_TRUE(scaled.precision->factors_judged);
  EXPECT_FALSE(scaled.precision->values_judged);
  EXPECT_EQ(scaled.diagnosis.factor, "x loss_scale") << scaled.diagnosis.text;
  PrecisionCriterion blind = criterion;
  blind.judge_factors = false;
  EXPECT_TRUE(row(16.0 * tilted, blind).passed) << "the flag is what judges it";
  // With R within 10% of fp64 the stretch by 2 is a factor too.
  const at::Tensor close = golden + 0.05 * at::abs(golden).max() * noise / at::abs(noise).max();
  const CheckRow close_doubled =
      make_precision_row("replay", "ln_f.weight[start]", 2.0 * (close + 0.05 * close.roll(3)), close, golden, criterion,
                         candidate_factors({{"tp", 2}, {"loss_scale", 16}}), 0.0, 1e-4);
  EXPECT_FALSE(close_doubled.passed);
  EXPECT_EQ(close_doubled.diagnosis.factor, "x tp") << close_doubled.diagnosis.text;
}

TEST(PrecisionRow, StoredValuesThatAllFitTheComputeDtypeFailTheMasterWeightsCheck) {
  const ThreeTensors t = three_tensors();
  const at::Tensor reference = t.reference.to(at::kFloat), golden = t.golden;
  PrecisionCriterion criterion;
  criterion.k = 4.0;
  criterion.floor = 0.05;
  criterion.storage = c10::kBFloat16;
  auto row = [&](const at::Tensor& candidate) {
    return make_precision_row("final_params", "w", candidate, reference, golden, criterion, {}, 0.0, 1e-4);
  };
  EXPECT_TRUE(row(reference).passed);
  EXPECT_EQ(row(reference).precision->reference_representable, representable_share(reference, c10::kBFloat16));
  // The same values rounded to bf16: within k of fp64's error, but every entry fits bf16.
  const CheckRow rounded = row(reference.to(at::kBFloat16).to(at::kFloat));
  EXPECT_LE(rounded.precision->candidate_golden, rounded.precision->allowed_golden);
  EXPECT_EQ(*rounded.precision->candidate_representable, 1.0);
  EXPECT_FALSE(rounded.passed);
  EXPECT_NE(rounded.diagnosis.text.find("100% of entries fit bf16 exactly"), std::string::npos)
      << rounded.diagnosis.text;
  EXPECT_EQ(representable_share(at::tensor({1.0, 0.5, 1.0 / 3}, at::kDouble), c10::kBFloat16), 2.0 / 3);
}

}  // namespace
}  // namespace magic
