#include <gtest/gtest.h>

#include "lib/core/error.h"
#include "lib/distributed/pools/three_pool_layout.h"
#include "tests/support.h"

namespace magic {
namespace {

using dist::PoolRole;
using dist::ThreePoolLayout;
using dist::TopologySpec;

TEST(ThreePoolTopology, DefaultsAndWorldSize) {
  auto t = TopologySpec::parse("n_ci=4,n_per_block=2");
  EXPECT_EQ(t.family(), dist::TopologyFamily::kThreePool);
  EXPECT_EQ(t.n_blocks(), 2);
  EXPECT_EQ(t.n_ppgd(), 2);
  EXPECT_EQ(t.world_size(), 10);  // 4 + 2 * 2 + 2
  EXPECT_EQ(t.str(), "n_ci=4,n_per_block=2,n_blocks=2,n_ppgd=2");
}

TEST(ThreePoolTopology, RejectsMixedAndIncompleteLayouts) {
  EXPECT_NE(
      testing::input_error_of([] { TopologySpec::parse("dp=2,n_ci=2,n_per_block=1"); }).find("dp cannot be combined"),
      std::string::npos);
  EXPECT_NE(testing::input_error_of([] { TopologySpec::parse("n_ci=2"); }).find("needs n_per_block"),
            std::string::npos);
  EXPECT_NE(
      testing::input_error_of([] { TopologySpec::parse("n_per_block=2,n_ppgd=0"); }).find("n_ppgd=0 must be >= 1"),
      std::string::npos);
}

TEST(ThreePoolLayout, RolesRanksAndSites) {
  ThreePoolLayout layout(TopologySpec::parse("n_ci=4,n_per_block=2"), 2);
  EXPECT_EQ(layout.ci_ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(layout.block_ranks(0), (std::vector<int>{4, 5}));
  EXPECT_EQ(layout.block_ranks(1), (std::vector<int>{6, 7}));
  EXPECT_EQ(layout.ppgd_ranks(), (std::vector<int>{8, 9}));
  EXPECT_EQ(layout.role(3), PoolRole::kCi);
  EXPECT_EQ(layout.role(6), PoolRole::kBlock);
  EXPECT_EQ(layout.block_of(7), 1);
  EXPECT_EQ(layout.index_in_pool(7), 1);
  EXPECT_EQ(layout.role(9), PoolRole::kPpgd);
  EXPECT_EQ(layout.index_in_pool(9), 1);
  EXPECT_EQ(layout.sites_of_block(1), (std::vector<int64_t>{1}));
  ThreePoolLayout uneven(TopologySpec::parse("n_ci=1,n_per_block=1,n_blocks=2"), 5);
  EXPECT_EQ(uneven.sites_of_block(0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(uneven.sites_of_block(1), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(uneven.block_of_site(3), 1);
}

TEST(ThreePoolLayout, BatchContractNamesTheConstraint) {
  ThreePoolLayout layout(TopologySpec::parse("n_ci=4,n_per_block=2"), 2);
  EXPECT_NO_THROW(layout.check_batch(16, "--batch"));
  EXPECT_NE(testing::input_error_of([&] {
              layout.check_batch(6, "--batch");
            }).find("6 rows does not split evenly over n_ci=4"),
            std::string::npos);
  ThreePoolLayout crossed(TopologySpec::parse("n_ci=3,n_per_block=2,n_ppgd=1"), 2);
  const std::string message = testing::input_error_of([&] { crossed.check_batch(12, "--batch"); });
  EXPECT_NE(message.find("batch splits between pools must divide each other"), std::string::npos) << message;
  EXPECT_NE(message.find("n_ci=3 gives 4-row shards, n_per_block=2 gives 6-row shards"), std::string::npos) << message;
  EXPECT_NE(testing::input_error_of([] {
              ThreePoolLayout(TopologySpec::parse("n_ci=1,n_per_block=1,n_blocks=3"), 2);
            }).find("n_blocks=3 exceeds the workload's 2 decomposed sites"),
            std::string::npos);
}

}  // namespace
}  // namespace magic
