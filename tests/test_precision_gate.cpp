// The low-precision gate's second pass (docs/magic-check.md, "Mixed precision"): an exact scale
// fails every row, judged or not; REPLAY's starting cotangent has rows of its own; AVG on unequal
// shards fails in every dtype, with its counts; rows that go unjudged below fp32 are judged again
// in an fp32 pass; a scalar row's floor is its own sensitivity; a factor is read against its level
// and the layout's sizes. Each with the planted error it must fail on.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checks/factor_context.h"
#include "checks/mutations.h"
#include "checks/pipeline_outputs.h"
#include "checks/run_check.h"
#include "lib/compare/check_row.h"
#include "lib/core/dtype.h"
#include "lib/core/seed.h"
#include "lib/io/report.h"
#include "tests/support.h"

namespace magic {
namespace {

at::Tensor random_vector(int64_t n, uint64_t seed) {
  at::Generator gen = make_generator(seed);
  return at::randn({n}, gen, at::TensorOptions().dtype(at::kDouble));
}

// A row as the scores are below fp32 under Adam: not judged by value, R far off fp64.
CheckRow unjudged_row(const at::Tensor& candidate, const at::Tensor& reference, const at::Tensor& golden,
                      const std::vector<NamedFactor>& factors) {
  PrecisionCriterion criterion;
  criterion.k = 8.0;
  criterion.floor = 0.42;  // bf16's u·√n for the scores
  criterion.judge_values = false;
  criterion.unjudged_because = "Adam's update amplifies rounding in near-zero gradients";
  return make_precision_row("scores", "per_token", candidate, reference, golden, criterion, factors, 0.0, 0.18);
}

// Item 1: the query gradient handed to REPLAY still carrying the loss scale S left the scores
// exactly xS (cosine 0.999999) and passed, not judged by value, below the gross rule's 100x.
TEST(PrecisionRow, AnExactScaleFailsEveryRowJudgedOrNotAndNamesIt) {
  const at::Tensor golden = random_vector(400, 11);
  const at::Tensor reference = golden + 0.6 * random_vector(400, 12);  // 60% off fp64: no signal
  const at::Tensor rounding = 1e-3 * random_vector(400, 13);           // D against R: 0.1%
  for (double S : {16.0, 64.0}) {
    const CheckRow scaled = unjudged_row(S * (reference + rounding), reference, golden,
                                         candidate_factors({{"dp", 2}, {"loss_scale", static_cast<int64_t>(S)}}));
    EXPECT_FALSE(scaled.passed) << S;
    EXPECT_FALSE(scaled.precision->values_judged);
    EXPECT_LT(scaled.precision->candidate_golden, 100.0) << "below the gross rule: only the exact scale sees it";
    EXPECT_EQ(scaled.diagnosis.factor, "x loss_scale") << scaled.diagnosis.text;
    EXPECT_NE(scaled.diagnosis.text.find("not judged by value, but an exact scale"), std::string::npos)
        << scaled.diagnosis.text;
  }
  // A scale no size of the layout explains is named as such.
  const CheckRow plain = unjudged_row(16.0 * (reference + rounding), reference, golden, candidate_factors({{"dp", 2}}));
  EXPECT_FALSE(plain.passed);
  EXPECT_NE(plain.diagnosis.text.find("scale 16.0"), std::string::npos) << plain.diagnosis.text;
  EXPECT_NE(plain.diagnosis.text.find("no topology factor"), std::string::npos) << plain.diagnosis.text;
  // Not exact, not failed: rounding that tilts D as much as it stretches it (5%), a scale within
  // 10% of 1, and a length carried by one entry (any two such vectors are parallel).
  EXPECT_TRUE(unjudged_row(2.0 * reference + 0.1 * random_vector(400, 14), reference, golden, {}).passed);
  EXPECT_TRUE(unjudged_row(1.05 * reference, reference, golden, {}).passed);
  at::Tensor spike = 1e-4 * random_vector(400, 15);
  spike[7] = 1.0;
  EXPECT_TRUE(unjudged_row(16.0 * spike, spike, golden, {}).passed);
  // And a judged row gets the same verdict and name.
  PrecisionCriterion judged;
  judged.k = 8.0;
  judged.floor = 50.0;  // so wide that the values alone pass it
  const CheckRow wide = make_precision_row("query_grad", "tok_emb", 16.0 * (reference + rounding), reference, golden,
                                           judged, candidate_factors({{"loss_scale", 16}}), 0.0, 1e-4);
  EXPECT_FALSE(wide.passed);
  EXPECT_EQ(wide.diagnosis.factor, "x loss_scale") << wide.diagnosis.text;
}

// Item 5: the clip coefficient summarizes the gradient's 11,824 entries in one number; its floor
// was u·√11824 (0.42 in bf16), and a clip-norm bug 0.20 off passed. Its sensitivity:
// |δc|/c <= ||δg||/||g|| <= u_compute·√(batch labels) + u_master·√(parameters).
TEST(PrecisionCriterion, AScalarRowsFloorIsItsOwnSensitivity) {
  checks::CheckSettings s;
  s.precision = PrecisionPolicy::for_compute(c10::kBFloat16);
  checks::NamedTensor clip{"optimizer", "clip_coefficient", at::ones({4}, at::kDouble), 0.0, true, 105};
  clip.master_sum_length = 11824;
  const PrecisionCriterion c = checks::precision_criterion(s, clip);
  const double expected = std::pow(2.0, -8) * std::sqrt(105.0) + std::pow(2.0, -24) * std::sqrt(11824.0);
  EXPECT_NEAR(c.floor, expected, 1e-15);
  EXPECT_LT(c.floor, 0.05);
  ASSERT_TRUE(c.bound.has_value());
  EXPECT_NEAR(*c.bound, 4.0 * expected, 1e-15);
}

// The rows at θ_N (the query gradient, the HVP there, REPLAY's start) under Adam below fp64 are
// judged by factor, not by value (a correct dp=1,tp=2 bf16 adamw run, seed 487 batch 1: 64% off
// fp64 where R is 5% off); under SGD by value; fp32's scores under Adam by factor, bf16's by
// neither (their lengths are noise there).
TEST(PrecisionCriterion, RowsAtThetaNUnderAdamAreJudgedByFactorOnly) {
  checks::NamedTensor query{"query_grad", "head.weight", at::ones({4}, at::kDouble), 0.0, false, 12};
  query.at_final_params = true;
  const checks::NamedTensor scores{"scores", "per_token", at::ones({4}, at::kDouble), 0.0, false, 11824};
  const checks::NamedTensor grad{"grad", "head.weight", at::ones({4}, at::kDouble), 0.0, true, 12};
  for (const auto compute : {c10::kFloat, c10::kBFloat16, c10::kHalf}) {
    checks::CheckSettings s;
    s.precision = PrecisionPolicy::for_compute(compute);
    s.optimizer = "adamw";
    const PrecisionCriterion at_theta_n = checks::precision_criterion(s, query);
    EXPECT_FALSE(at_theta_n.judge_values);
    EXPECT_TRUE(at_theta_n.judge_factors);
    EXPECT_TRUE(checks::precision_criterion(s, grad).judge_values) << "shared inputs stay judged";
    const PrecisionCriterion score = checks::precision_criterion(s, scores);
    EXPECT_FALSE(score.judge_values);
    EXPECT_EQ(score.judge_factors, compute == c10::kFloat);
    s.optimizer = "sgd";
    EXPECT_TRUE(checks::precision_criterion(s, query).judge_values);
    EXPECT_TRUE(checks::precision_criterion(s, scores).judge_values);
  }
}

// In fp32 under Adam the query gradient is judged by factor only: a clean run's level carries no
// signal by value, but a factor bug there still runs under --bite and is caught with its factor.
TEST(LowPrecisionGate, AFactorAtThetaNUnderAdamIsStillCaughtInFp32) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=2");
  request.settings.precision = PrecisionPolicy::for_compute(c10::kFloat);
  request.settings.levels = {checks::Level::kQueryGrad};
  const CheckReport clean = testing::run_check_in_threads(request);
  ASSERT_TRUE(clean.rows_pass());
  EXPECT_NE(checks::unjudged_level(clean.rows, "query_grad").find("carries no signal"), std::string::npos);
  EXPECT_EQ(checks::unjudged_level(clean.rows, "query_grad", /*factor_expected=*/true), "");
  request.mode = checks::CheckMode::kMutate;
  request.mutation = "query-grad-scaled";
  const CheckReport planted = testing::run_check_in_threads(request);
  ASSERT_EQ(planted.bite.size(), 1u);
  EXPECT_TRUE(planted.bite.front().caught) << planted.bite.front().observed_diagnosis;
  EXPECT_EQ(planted.bite.front().observed_factor, "x dp");
}

// The clip coefficient row itself now sees clip-local-norm in bf16 (the run that found it: 0.20
// off against an allowed 0.43).
TEST(LowPrecisionGate, TheClipCoefficientRowSeesAClipNormBugInBf16) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=2");
  request.settings.precision = PrecisionPolicy::for_compute(c10::kBFloat16);
  request.settings.levels = {checks::Level::kGrad, checks::Level::kOptimizer};
  request.mode = checks::CheckMode::kMutate;
  request.mutation = "clip-local-norm";
  const CheckReport report = testing::run_check_in_threads(request);
  bool seen = false;
  for (const auto& row : report.rows) {
    if (row.level != "optimizer" || row.tensor != "clip_coefficient") continue;
    seen = true;
    EXPECT_FALSE(row.passed) << row.diagnosis.text;
    ASSERT_TRUE(row.precision.has_value());
    EXPECT_LT(row.precision->allowed_golden, 0.1) << "its own sensitivity, not 0.43";
  }
  EXPECT_TRUE(seen);
}

// Items 1 and 2: REPLAY started from the loss-scaled query gradient. Its [start] rows name the loss
// scale on every parameter, in every precision; in fp16 the token scores, not judged by value under
// Adam below fp32, fail as an exact scale too (D/R constant to 2e-3). In bf16 on dp=2 two correct
// runs' token scores are 3% apart in direction (R 57% off fp64): no exact scale there, and the
// [start] rows alone catch it. Where the scale is 1 the bug does not exist (it does not apply).
TEST(LowPrecisionGate, ALossScaleLeftOnReplaysStartIsCaughtAtItsStartAndInTheScores) {
  struct Case {
    c10::ScalarType compute;
    double loss_scale;
    bool scores_exact;
  };
  for (const Case& c : {Case{c10::kBFloat16, 16, false}, Case{c10::kHalf, 16, true}, Case{c10::kHalf, 64, true}}) {
    checks::CheckRequest request;
    request.settings.topology = dist::TopologySpec::parse("dp=2");
    request.settings.precision = PrecisionPolicy::for_compute(c.compute);
    request.settings.precision.loss_scale = c.loss_scale;
    request.settings.levels = {checks::Level::kReplay, checks::Level::kScores};
    request.mode = checks::CheckMode::kMutate;
    request.mutation = "replay-start-keeps-loss-scale";
    const CheckReport report = testing::run_check_in_threads(request);
    ASSERT_EQ(report.bite.size(), 1u);
    EXPECT_TRUE(report.bite.front().caught) << report.bite.front().observed_diagnosis;
    EXPECT_EQ(report.bite.front().observed_factor, "x loss_scale");
    int start_rows = 0;
    for (const auto& row : report.rows) {
      if (row.tensor.find("[start]") != std::string::npos) {
        ++start_rows;
        EXPECT_FALSE(row.passed) << row.tensor;
        EXPECT_EQ(row.diagnosis.factor, "x loss_scale") << row.tensor << ": " << row.diagnosis.text;
        EXPECT_EQ(row.stats.numel % 2, 0) << "every rank's copy";
      }
      if (row.level == "scores" && row.tensor == "per_token" && c.scores_exact) {
        EXPECT_FALSE(row.passed) << row.diagnosis.text;
        EXPECT_NE(row.diagnosis.text.find("not judged by value, but an exact scale"), std::string::npos)
            << row.diagnosis.text;
        EXPECT_EQ(row.diagnosis.factor, "x loss_scale") << row.diagnosis.text;
      }
    }
    EXPECT_EQ(start_rows, 17) << "one per parameter";
  }
  // No loss scale, no such bug: bf16's default policy does not run it.
  for (const auto& m : checks::mutation_catalog()) {
    if (m.name != "replay-start-keeps-loss-scale") continue;
    EXPECT_NE(
        checks::unmet_requirement(m, dist::TopologySpec::parse("dp=2"), PrecisionPolicy::for_compute(c10::kBFloat16)),
        "");
  }
}

// Item 3: AVG on unequal shards is wrong by a factor the label counts fix before any gradient is
// computed. bf16 passed it (0.8% inside its gradient noise); the shard weights row fails in every
// dtype, naming the counts and the weights they imply, and the note says it in every dtype too.
TEST(LowPrecisionGate, AvgOnUnequalShardsFailsInEveryDtypeWithItsCounts) {
  for (const auto dtype : {c10::kDouble, c10::kBFloat16, c10::kHalf}) {
    checks::CheckRequest request;
    request.settings.topology = dist::TopologySpec::parse("dp=2,cp=2");
    request.settings.precision = PrecisionPolicy::for_compute(dtype);
    request.settings.convention = dist::Convention::kAvg;
    request.settings.levels = {checks::Level::kGrad};
    const CheckReport report = testing::run_check_in_threads(request);
    EXPECT_EQ(report.exit_code(), 1) << dtype_name(dtype);
    const CheckRow* weights = nullptr;
    for (const auto& row : report.rows) {
      if (row.tensor == "shard_weights") weights = &row;
    }
    ASSERT_NE(weights, nullptr);
    EXPECT_FALSE(weights->passed);
    for (const char* says : {"AVG meets unequal shards", "step 0: valid labels by rank 24, 28, 21, 24 (N = 97)",
                             "weights 1.0104, 0.8661, 1.1548, 1.0104"}) {
      EXPECT_NE(weights->diagnosis.text.find(says), std::string::npos)
          << dtype_name(dtype) << ": " << weights->diagnosis.text;
    }
    // 97 / (4 · 24) = 1.0104, 97 / (4 · 28) = 0.8661, 97 / (4 · 21) = 1.1548: N/(R·n_r) by hand.
    ASSERT_EQ(report.notes.size(), 1u) << dtype_name(dtype);
    EXPECT_EQ(report.notes[0].rfind("AVG meets unequal shards", 0), 0u) << report.notes[0];
    EXPECT_NE(report_json(report)["notes"][0].get<std::string>().find("24, 28, 21, 24"), std::string::npos);
  }
}

// The same row under SUM is exactly 1 everywhere, and a normalizer over too few ranks reads as
// its factor (cp-dp-only-normalizer: ≈ x cp).
TEST(LowPrecisionGate, TheShardWeightsRowNamesANormalizerOverTooFewRanks) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=2,cp=3");
  request.settings.levels = {checks::Level::kGrad};
  for (const std::string mutation : {"", "cp-dp-only-normalizer"}) {
    request.mode = mutation.empty() ? checks::CheckMode::kPlain : checks::CheckMode::kMutate;
    request.mutation = mutation;
    const CheckReport report = testing::run_check_in_threads(request);
    int rows = 0;
    for (const auto& row : report.rows) {
      if (row.tensor != "shard_weights") continue;
      ++rows;
      EXPECT_EQ(row.passed, mutation.empty()) << row.diagnosis.text;
      EXPECT_EQ(row.stats.numel, 4 * 6) << "steps x ranks";
      if (!mutation.empty()) {
        EXPECT_EQ(row.diagnosis.factor, "x cp") << row.diagnosis.text;
      }
    }
    EXPECT_EQ(rows, 1) << mutation;
  }
}

// Item 4: a per-token weight misplaced by one position on odd dp ranks moves only where dQ/dw
// lands. On dp=2 in bf16 (seed 0) the one row that sees it, replay w[vjp], is judged so loosely
// (R 57% off fp64) that it passes; the fp32 pass judges it again and fails it.
TEST(LowPrecisionGate, ARowTooNoisyBelowFp32IsJudgedAgainInTheFp32Pass) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=2");
  request.settings.precision = PrecisionPolicy::for_compute(c10::kBFloat16);
  request.mode = checks::CheckMode::kMutate;
  request.mutation = "token-weight-shifted";
  const CheckReport report = testing::run_check_in_threads(request);
  const CheckRow *own = nullptr, *fp32 = nullptr;
  for (const auto& row : report.rows) {
    if (row.level != "replay" || row.tensor != "w[vjp]") continue;
    (row.pass.empty() ? own : fp32) = &row;
  }
  ASSERT_NE(own, nullptr);
  ASSERT_NE(fp32, nullptr) << "the weakly judged row has its fp32 partner, right after it";
  EXPECT_TRUE(own->passed) << "bf16 alone cannot see it: " << own->diagnosis.text;
  EXPECT_TRUE(row_weakly_judged(*own));
  EXPECT_FALSE(fp32->passed);
  EXPECT_EQ(fp32->pass, "fp32");
  ASSERT_TRUE(fp32->precision.has_value());
  EXPECT_LT(fp32->precision->reference_golden, 1e-4) << "fp32's reference is tight";
  ASSERT_EQ(report.bite.size(), 1u);
  EXPECT_TRUE(report.bite.front().caught);
  EXPECT_EQ(report.bite.front().observed_diagnosis.rfind("w[vjp] (fp32): ", 0), 0u)
      << report.bite.front().observed_diagnosis;
  // The report carries it in every format.
  const auto json = report_json(report);
  bool in_json = false;
  for (const auto& row : json["checks"]) in_json = in_json || row["pass"] == "fp32";
  EXPECT_TRUE(in_json);
  EXPECT_NE(junit_xml(report).find("name=\"w[vjp] (fp32)\""), std::string::npos);
}

// Two rows bf16 judges but too loosely for some bugs go to the fp32 pass as well: the clip
// coefficient of a run that clips (a norm over one pipeline stage moves it 2.5%, under bf16's 7.5%
// allowance) and, under Adam, a factor at θ_N that bf16's noise blurs (the query gradient x dp read
// as 3.06 there). Each passes in its own dtype and fails in the fp32 pass.
TEST(LowPrecisionGate, TheClipCoefficientAndAFactorAtThetaNAreJudgedAgainAtFp32) {
  struct Case {
    std::string model, topology, mutation, level, tensor, observed_factor;
    std::vector<checks::Level> levels;
  };
  const std::vector<Case> cases = {
      {"",
       "dp=3,pp=2,mb=4",
       "pp-norm-one-stage",
       "optimizer",
       "clip_coefficient",
       "",
       {checks::Level::kGrad, checks::Level::kOptimizer}},
      {testing::source_path("fixtures/models/gpt2-tiny"),
       "dp=3,mb=4",
       "query-grad-scaled",
       "query_grad",
       "tok_emb",
       "x dp",
       {}},
  };
  for (const Case& c : cases) {
    checks::CheckRequest request;
    request.settings.model_folder = c.model;
    request.settings.topology = dist::TopologySpec::parse(c.topology);
    request.settings.precision = PrecisionPolicy::for_compute(c10::kBFloat16);
    request.settings.steps = 2;
    if (!c.levels.empty()) request.settings.levels = c.levels;
    request.mode = checks::CheckMode::kMutate;
    request.mutation = c.mutation;
    const CheckReport report = testing::run_check_in_threads(request);
    const CheckRow *own = nullptr, *fp32 = nullptr;
    for (const auto& row : report.rows) {
      if (row.level == c.level && row.tensor == c.tensor) (row.pass.empty() ? own : fp32) = &row;
    }
    ASSERT_NE(own, nullptr) << c.mutation;
    ASSERT_NE(fp32, nullptr) << c.mutation << ": no fp32 partner";
    EXPECT_TRUE(own->passed) << c.mutation << ": bf16 alone cannot see it: " << own->diagnosis.text;
    EXPECT_FALSE(fp32->passed) << c.mutation;
    ASSERT_EQ(report.bite.size(), 1u);
    EXPECT_TRUE(report.bite.front().caught) << c.mutation << ": " << report.bite.front().observed_diagnosis;
    EXPECT_EQ(report.bite.front().observed_factor, c.observed_factor) << c.mutation;
  }
}

// A clean bf16 run: every fp32 row passes; a mutation of the precision policy gets no fp32 pass
// (it is judged in its own dtype only).
TEST(LowPrecisionGate, TheFp32PassPassesACleanRunAndLeavesPrecisionBugsToTheirDtype) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=2");
  request.settings.precision = PrecisionPolicy::for_compute(c10::kBFloat16);
  const CheckReport clean = testing::run_check_in_threads(request);
  int fp32_rows = 0;
  for (const auto& row : clean.rows) {
    EXPECT_TRUE(row.passed) << row.level << " " << row_label(row) << ": " << row.diagnosis.text;
    fp32_rows += row.pass == "fp32";
  }
  EXPECT_GE(fp32_rows, 10) << "the rows bf16 leaves unjudged (updates, REPLAY's whole steps, scores)";
  request.mode = checks::CheckMode::kMutate;
  request.mutation = "reduce-in-compute-dtype";
  request.settings.levels = {checks::Level::kGrad};
  for (const auto& row : testing::run_check_in_threads(request).rows) EXPECT_EQ(row.pass, "") << row.tensor;
}

// Item 6: a scale on one tensor of a level whose other rows pass is that tensor's; equal sizes
// cannot tell their factors apart, and the row names a layout whose sizes differ.
TEST(FactorContext, ReadsAFactorAgainstItsLevelAndTheLayoutsSizes) {
  const auto factors = candidate_factors({{"dp", 2}, {"cp", 2}});
  const at::Tensor r = random_vector(64, 21);
  std::vector<CheckRow> rows = {make_check_row("grad", "tok_emb", 2.0 * r, r, 1e-9, factors),
                                make_check_row("grad", "pos_emb", r, r, 1e-9, factors),
                                make_check_row("grad", "head.weight", r, r, 1e-9, factors)};
  checks::add_factor_context(rows, dist::TopologySpec::parse("dp=2,cp=2"), PrecisionPolicy{});
  EXPECT_EQ(rows[0].diagnosis.text,
            "x dp or x cp (scale 2.000000); on this tensor only (the other 2 grad rows pass); dp = cp = 2 here, so "
            "this layout cannot tell them apart (one whose sizes differ can: dp=2,cp=3)");
  EXPECT_EQ(rows[0].diagnosis.factors, (std::vector<std::string>{"x dp", "x cp"})) << "the bite still sees both";
  // On dp=2 the one candidate is named, and it is still one tensor's scale.
  std::vector<CheckRow> alone = {make_check_row("grad", "tok_emb", 2.0 * r, r, 1e-9, candidate_factors({{"dp", 2}})),
                                 make_check_row("grad", "pos_emb", r, r, 1e-9, candidate_factors({{"dp", 2}}))};
  checks::add_factor_context(alone, dist::TopologySpec::parse("dp=2"), PrecisionPolicy{});
  EXPECT_EQ(alone[0].diagnosis.text, "x dp (scale 2.000000); on this tensor only (the other 1 grad rows pass)");
  // Every row of the level scaled (a reduction's bug): no "only".
  std::vector<CheckRow> all = {make_check_row("grad", "tok_emb", 2.0 * r, r, 1e-9, candidate_factors({{"dp", 2}})),
                               make_check_row("grad", "pos_emb", 2.0 * r, r, 1e-9, candidate_factors({{"dp", 2}}))};
  checks::add_factor_context(all, dist::TopologySpec::parse("dp=2"), PrecisionPolicy{});
  EXPECT_EQ(all[0].diagnosis.text, "x dp (scale 2.000000)");
}

TEST(FactorContext, NamesTheSmallestNearbyLayoutWhoseSizesAllDiffer) {
  const auto distinct = [](const std::string& layout, PrecisionPolicy p = {}) {
    return checks::layout_with_distinct_sizes(dist::TopologySpec::parse(layout), p).str();
  };
  EXPECT_EQ(distinct("dp=2,cp=2"), "dp=2,cp=3");
  EXPECT_EQ(distinct("dp=4,fsdp=4"), "dp=8,fsdp=4");
  EXPECT_EQ(distinct("dp=3,cp=2"), "dp=3,cp=2") << "already distinct";
  PrecisionPolicy scaled = PrecisionPolicy::for_compute(c10::kHalf);
  scaled.loss_scale = 4;
  EXPECT_EQ(distinct("dp=4", scaled), "dp=5") << "the loss scale is a size too";
  // n_ci=4, n_per_block=2, n_blocks=2, n_ppgd=2, world 10: the smallest world with all five apart.
  const dist::TopologySpec pools =
      checks::layout_with_distinct_sizes(dist::TopologySpec::parse("n_ci=4,n_per_block=2"), {});
  std::vector<int64_t> sizes;
  for (const auto& [name, value] : pools.named_sizes()) sizes.push_back(value);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(std::adjacent_find(sizes.begin(), sizes.end()), sizes.end()) << pools.str();
  EXPECT_EQ(pools.world_size(), 15) << pools.str();
}

}  // namespace
}  // namespace magic
