// The checks with ranks as threads of this process: each mutation, planted alone, is caught at
// its expected level with its expected factor, on the first layout of its family it applies to
// whose sizes all differ (mesh: dp=3, dp=2,cp=3, dp=4,fsdp=2; the three-pool
// n_ci=6,n_per_block=2,n_blocks=1,n_ppgd=3, 12 ranks), so that the factor the diagnosis observes
// names exactly one size, in fp64 unless the mutation needs a lower precision (then fp16, whose
// loss scale 1024 is a size of its own); fp32 is judged against fp64; empty shards are fine.
// The mutations beyond a single machine's resolution are shown not to be caught (the reason
// --bite gives for skipping them).
#include <gtest/gtest.h>

#include "checks/mutations.h"
#include "checks/run_check.h"
#include "tests/support.h"

namespace magic {
namespace {

class EachMutation : public ::testing::TestWithParam<checks::Mutation> {};

// The first (layout, precision) among the distinct layouts and fp64, fp16 the mutation applies to.
checks::CheckSettings distinct_settings_for(const checks::Mutation& m) {
  for (c10::ScalarType dtype : {c10::kDouble, c10::kHalf}) {
    for (const char* text : {"dp=3", "dp=2,cp=3", "dp=4,fsdp=2", "n_ci=6,n_per_block=2,n_blocks=1,n_ppgd=3"}) {
      checks::CheckSettings s;
      s.topology = dist::TopologySpec::parse(text);
      s.precision = PrecisionPolicy::for_compute(dtype);
      if ((!m.family || s.topology.family() == m.family) &&
          checks::unmet_requirement(m, s.topology, s.precision).empty()) {
        return s;
      }
    }
  }
  throw std::logic_error("no test layout for " + m.name);
}

std::vector<checks::Mutation> mutations_within_resolution(bool within) {
  std::vector<checks::Mutation> out;
  for (const auto& m : checks::mutation_catalog()) {
    if (m.beyond_resolution.empty() == within) out.push_back(m);
  }
  return out;
}

TEST_P(EachMutation, IsCaughtAtItsLevelWithItsFactor) {
  checks::CheckRequest request;
  request.settings = distinct_settings_for(GetParam());
  request.mode = checks::CheckMode::kMutate;
  request.mutation = GetParam().name;
  const CheckReport report = testing::run_check_in_threads(request);
  ASSERT_EQ(report.bite.size(), 1u);
  const BiteOutcome& b = report.bite.front();
  EXPECT_TRUE(b.caught) << b.mutation << ": observed " << b.observed_level << ": " << b.observed_diagnosis;
  EXPECT_EQ(b.observed_level, GetParam().expected_level);
  if (!GetParam().expected_factor.empty()) {
    // The names the observed scale matches, from the diagnosis: exactly the expected one.
    EXPECT_EQ(b.observed_factor, GetParam().expected_factor) << b.observed_diagnosis;
    EXPECT_TRUE(b.factor_distinct);
  }
  EXPECT_EQ(report.exit_code(), 1) << "a planted bug fails the run";
}

}  // namespace
}  // namespace magic

namespace magic::checks {
void PrintTo(const Mutation& m, std::ostream* out) {
  *out << m.name;
}
}  // namespace magic::checks

namespace magic {
namespace {

std::string mutation_name(const ::testing::TestParamInfo<checks::Mutation>& info) {
  std::string name = info.param.name;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Catalog, EachMutation, ::testing::ValuesIn(mutations_within_resolution(true)), mutation_name);

// --bite skips these with a stated reason; this shows the reason holds: planted alone on dp=3 in
// fp16 (where they apply), the run passes every row.
TEST(DataParallelCheck, MutationsBeyondResolutionAreNotCaughtOnOneMachine) {
  const auto beyond = mutations_within_resolution(false);
  ASSERT_EQ(beyond.size(), 2u);
  for (const auto& m : beyond) {
    checks::CheckRequest request;
    request.settings = distinct_settings_for(m);
    EXPECT_EQ(request.settings.precision.compute, c10::kHalf) << m.name;
    request.mode = checks::CheckMode::kMutate;
    request.mutation = m.name;
    const CheckReport report = testing::run_check_in_threads(request);
    ASSERT_EQ(report.bite.size(), 1u);
    EXPECT_FALSE(report.bite.front().caught) << m.name;
    EXPECT_EQ(report.bite.front().observed_level, "")
        << m.name << " failed a row: " << report.bite.front().observed_diagnosis;
  }
}

TEST(DataParallelCheck, Fp32IsJudgedAgainstTheFp64GoldenRun) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=2");
  request.settings.precision = PrecisionPolicy::for_compute(c10::kFloat);
  const CheckReport report = testing::run_check_in_threads(request);
  EXPECT_TRUE(report.rows_pass());
  for (const auto& row : report.rows) {
    ASSERT_TRUE(row.precision.has_value()) << row.tensor;
    EXPECT_GT(row.precision->reference_golden, 0.0) << row.tensor;  // fp32 really ran
    EXPECT_LE(row.precision->candidate_golden, row.precision->allowed_golden) << row.tensor;
  }
}

// Found by magic-check itself: REPLAY took its vector-Jacobian products with unscaled cotangents,
// which the fp16 parts of the backward of the backward flushed, so its fp16 scores were 20-100
// times less accurate than the unrolled reference's (err(D, R) 0.05-0.2 on this layout); REPLAY
// now scales them by the loss scale (StepFunction::cotangent_scale).
TEST(DataParallelCheck, Fp16ReplayKeepsItsCotangentsInRange) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("n_ci=2,n_per_block=1");
  request.settings.precision = PrecisionPolicy::for_compute(c10::kHalf);
  request.settings.seed = 1;
  request.settings.optimizer = "adam";
  request.settings.steps = 3;
  const CheckReport report = testing::run_check_in_threads(request);
  for (const auto& row : report.rows) {
    EXPECT_TRUE(row.passed) << row.level << "/" << row.tensor << ": " << row.diagnosis.text;
    if (row.level == "scores") {
      EXPECT_LT(row.stats.worst_rel_err, 0.02);
    }
  }
}

TEST(DataParallelCheck, RanksWithEmptyShardsStillMatchTheReference) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=4");
  request.settings.batch_size = 2;  // two of the four ranks hold no rows
  const CheckReport report = testing::run_check_in_threads(request);
  EXPECT_TRUE(report.rows_pass());
}

}  // namespace
}  // namespace magic

namespace magic {
namespace {

// Found by the 500-case property run: with gradient clipping and a one-document batch, the clip
// is scale-invariant in that document's weights, so its per-document score (the sum of its token
// scores) cancels to ~3.6e-10 while the token scores are ~5.8e-3. The row's error is measured
// against the size of the summed terms, so rounding noise of the cancellation passes ...
TEST(DataParallelCheck, PerDocumentScoresAreComparedAtTheScaleOfTheirTokenScores) {
  checks::CheckRequest request;
  auto& s = request.settings;
  s.topology = dist::TopologySpec::parse("dp=2");
  s.steps = 1;
  s.max_len = 8;
  s.optimizer = "sgd";
  s.seed = 103;
  s.documents = 6;
  s.batch_size = 1;
  const CheckReport report = testing::run_check_in_threads(request);
  for (const auto& row : report.rows) {
    EXPECT_TRUE(row.passed) << row.level << "/" << row.tensor << ": " << row.diagnosis.text;
  }
}

// ... and a real error in them still fails.
TEST(DataParallelCheck, AnErrorInCancellingPerDocumentScoresStillFails) {
  const at::Tensor tokens = at::tensor({1.0, -1.0, 0.5, -0.5 + 1e-10}, at::kDouble).view({2, 2});
  const at::Tensor per_document = tokens.sum(1);
  const double terms = tokens.abs().sum(1).max().item<double>();
  const auto factors = candidate_factors({{"dp", 2}});
  EXPECT_TRUE(
      make_check_row("scores", "per_document", per_document + 1e-18, per_document, 1e-9, factors, terms).passed);
  EXPECT_FALSE(make_check_row("scores", "per_document", 2.0 * per_document, per_document, 1e-9, factors).passed);
  EXPECT_FALSE(
      make_check_row("scores", "per_document", per_document + 1e-6, per_document, 1e-9, factors, terms).passed);
}

}  // namespace
}  // namespace magic
