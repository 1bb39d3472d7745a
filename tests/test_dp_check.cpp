// The data-parallel LM check with ranks as threads of this process: each mutation, planted alone,
// is caught at its expected level with its expected factor (dp=3: "x dp" means x3 here, unlike
// the dp=4 runs of test_magic_check_cli); fp32 passes at its tolerance; empty shards are fine.
#include <gtest/gtest.h>

#include "checks/mutations.h"
#include "checks/run_check.h"

namespace magic {
namespace {

CheckReport run_threads(const checks::CheckRequest& request) {
  CheckReport report;
  dist::run_ranks_in_threads(static_cast<int>(request.settings.topology.world_size()), [&](dist::Runtime& rt) {
    CheckReport r = checks::run_check(request, rt);
    if (rt.rank() == 0) report = r;
  });
  return report;
}

class EachMutation : public ::testing::TestWithParam<checks::Mutation> {};

TEST_P(EachMutation, IsCaughtAtItsLevelWithItsFactor) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=3");
  request.mode = checks::CheckMode::kMutate;
  request.mutation = GetParam().name;
  const CheckReport report = run_threads(request);
  ASSERT_EQ(report.bite.size(), 1u);
  const BiteOutcome& b = report.bite.front();
  EXPECT_TRUE(b.caught) << b.mutation << ": observed " << b.observed_level << ": " << b.observed_diagnosis;
  EXPECT_EQ(b.observed_level, GetParam().expected_level);
  if (!GetParam().expected_factor.empty()) {
    EXPECT_EQ(b.observed_factor, GetParam().expected_factor);
  }
  EXPECT_EQ(report.exit_code(), 1) << "a planted bug fails the run";
}

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
  const CheckReport report = run_threads(request);
  EXPECT_TRUE(report.rows_pass());
  for (const auto& row : report.rows) EXPECT_EQ(row.tolerance, 1e-4);
}

TEST(DataParallelCheck, RanksWithEmptyShardsStillMatchTheReference) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse("dp=4");
  request.settings.batch_size = 2;  // two of the four ranks hold no rows
  const CheckReport report = run_threads(request);
  EXPECT_TRUE(report.rows_pass());
}

}  // namespace
}  // namespace magic
