// The checks with ranks as threads of this process: each mutation, planted alone, is caught at
// its expected level with its expected factor, on a layout of its family whose sizes all differ
// (dp=3; the three-pool n_ci=6,n_per_block=2,n_blocks=1,n_ppgd=3, 12 ranks), so that the factor
// the diagnosis observes names exactly one size; fp32 passes at its tolerance; empty shards are
// fine.
#include <gtest/gtest.h>

#include "checks/mutations.h"
#include "checks/run_check.h"
#include "tests/support.h"

namespace magic {
namespace {

class EachMutation : public ::testing::TestWithParam<checks::Mutation> {};

TEST_P(EachMutation, IsCaughtAtItsLevelWithItsFactor) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse(
      GetParam().family == dist::TopologyFamily::kMesh ? "dp=3" : "n_ci=6,n_per_block=2,n_blocks=1,n_ppgd=3");
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
