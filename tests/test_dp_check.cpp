// The checks with ranks as threads of this process: each mutation, planted alone, is caught at
// its expected level with its expected factor, on the first layout of its family it applies to
// whose sizes all differ (mesh: dp=3, dp=2,cp=3, dp=4,fsdp=2; the three-pool
// n_ci=6,n_per_block=2,n_blocks=1,n_ppgd=3, 12 ranks), so that the factor the diagnosis observes
// names exactly one size; fp32 passes at its tolerance; empty shards are fine.
#include <gtest/gtest.h>

#include "checks/mutations.h"
#include "checks/run_check.h"
#include "tests/support.h"

namespace magic {
namespace {

class EachMutation : public ::testing::TestWithParam<checks::Mutation> {};

dist::TopologySpec distinct_layout_for(const checks::Mutation& m) {
  for (const char* text : {"dp=3", "dp=2,cp=3", "dp=4,fsdp=2", "n_ci=6,n_per_block=2,n_blocks=1,n_ppgd=3"}) {
    const auto topology = dist::TopologySpec::parse(text);
    if (topology.family() == m.family && checks::unmet_requirement(m, topology).empty()) return topology;
  }
  throw std::logic_error("no test layout for " + m.name);
}

TEST_P(EachMutation, IsCaughtAtItsLevelWithItsFactor) {
  checks::CheckRequest request;
  request.settings.topology = distinct_layout_for(GetParam());
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

INSTANTIATE_TEST_SUITE_P(Catalog, EachMutation, ::testing::ValuesIn(checks::mutation_catalog()), mutation_name);

TEST(DataParallelCheck, Fp32PassesAtItsTolerance) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=2");
  request.settings.dtype = c10::kFloat;
  const CheckReport report = testing::run_check_in_threads(request);
  EXPECT_TRUE(report.rows_pass());
  for (const auto& row : report.rows) EXPECT_EQ(row.tolerance, 1e-4);
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
