// The decomposition workload on three-pool layouts with ranks as threads: square and non-square
// layouts, several sites per block, single-rank pools, all match the reference at fp64 precision
// at every level; per-term rows are present; a batch that breaks the pools' contract is an
// input error naming the constraint.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <tuple>

#include "checks/run_check.h"
#include "lib/core/error.h"
#include "tests/support.h"

namespace magic {
namespace {

// A layout, and whether every portal's wire tag is 0 (matching by order alone, as on NCCL).
class ThreePoolLayouts : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(ThreePoolLayouts, MatchTheReferenceAtEveryLevel) {
  testing::PortalTagsGuard tags(std::get<1>(GetParam()) ? dist::PortalTags::kZero : dist::PortalTags::kPerTransfer);
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse(std::get<0>(GetParam()));
  request.settings.steps = 3;
  const CheckReport report = testing::run_check_in_threads(request);
  EXPECT_EQ(report.workload, "spd");
  EXPECT_TRUE(report.rows_pass());
  std::set<std::string> names;
  for (const auto& row : report.rows) {
    names.insert(row.level + "/" + row.tensor);
    EXPECT_LE(row.stats.worst_rel_err, 1e-9) << row.level << "/" << row.tensor;
  }
  for (const char* expected : {"grad/theta_ci[importance]", "grad/V/U[faithfulness]", "grad/V/U[ppgd]", "hvp/theta_N",
                               "final_params/sources", "scores/per_document"}) {
    EXPECT_TRUE(names.count(expected)) << expected;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ThreePoolLayouts,
                         ::testing::Combine(::testing::Values("n_ci=1,n_per_block=1,n_blocks=1,n_ppgd=1",
                                                              "n_ci=2,n_per_block=1,n_blocks=3,n_ppgd=2",
                                                              "n_ci=1,n_per_block=3,n_blocks=2,n_ppgd=1",
                                                              "n_ci=2,n_per_block=4,n_blocks=1,n_ppgd=2"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return testing::test_name(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_tags_zero" : "_tagged");
                         });

TEST(ThreePoolCheck, SgdAndAdamToo) {
  for (std::string optimizer : {"sgd", "adam"}) {
    checks::CheckRequest request;
    request.settings.topology = dist::TopologySpec::parse("n_ci=2,n_per_block=2,n_blocks=2,n_ppgd=1");
    request.settings.optimizer = optimizer;
    EXPECT_TRUE(testing::run_check_in_threads(request).rows_pass()) << optimizer;
  }
}

TEST(ThreePoolCheck, ABatchThatBreaksTheContractIsAnInputError) {
  checks::CheckSettings s;
  s.topology = dist::TopologySpec::parse("n_ci=4,n_per_block=2");
  s.batch_size = 6;
  try {
    s.validate();
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("does not split evenly over n_ci=4"), std::string::npos) << e.what();
  }
  s.convention = dist::Convention::kAvg;
  s.batch_size = 0;
  EXPECT_THROW(s.validate(), InputError);  // the three-pool workload reduces with SUM
}

}  // namespace
}  // namespace magic
