#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "lib/core/error.h"
#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/runtime/topology.h"
#include "tests/support.h"

namespace magic {
namespace {

using dist::TopologySpec;

std::string error_of(const std::string& text) {
  return testing::input_error_of([&] { TopologySpec::parse(text); });
}

TEST(Topology, ParsesDataParallelSizes) {
  auto t = TopologySpec::parse("dp=4");
  EXPECT_EQ(t.dp(), 4);
  EXPECT_EQ(t.world_size(), 4);
  EXPECT_EQ(t.str(), "dp=4");
}

TEST(Topology, RejectsBadStringsNamingTheProblemAndTheValidKeys) {
  EXPECT_NE(error_of("dp=0").find("dp=0 must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("dp=-2").find("must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("dp=2.5").find("is not an integer"), std::string::npos);
  EXPECT_NE(error_of("dp=").find("is not an integer"), std::string::npos);
  EXPECT_NE(error_of("dp").find("'dp' is not key=value"), std::string::npos);
  EXPECT_NE(error_of("dp=2,").find("'' is not key=value"), std::string::npos);
  EXPECT_NE(error_of("dp=2,dp=2").find("given twice"), std::string::npos);
  EXPECT_NE(error_of("dq=2").find("unknown key 'dq' (did you mean dp?)"), std::string::npos);
  EXPECT_NE(error_of("dp=2,sp").find("sp needs tp > 1"), std::string::npos);
  EXPECT_NE(error_of("tp=2,sp=2").find("sp is a flag"), std::string::npos);
  EXPECT_NE(error_of("tp=2,sp,sp").find("'sp' given twice"), std::string::npos);
  EXPECT_NE(error_of("tp=2,n_ci=2,n_per_block=1").find("tp cannot be combined"), std::string::npos);
  EXPECT_NE(error_of("mb=0").find("mb=0 must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("dp=2,fdsp=2").find("unknown key 'fdsp' (did you mean fsdp?)"), std::string::npos);
  EXPECT_NE(error_of("n_ci=2,n_per_blok=1").find("unknown key 'n_per_blok' (did you mean n_per_block?)"),
            std::string::npos);
  EXPECT_NE(error_of("dp=4,fsdp=3").find("fsdp=3 must divide dp=4"), std::string::npos);
  EXPECT_NE(error_of("cp=2,n_ci=2,n_per_block=1").find("cp cannot be combined"), std::string::npos);
  EXPECT_NE(error_of("").find("empty topology"), std::string::npos);
  // A product of sizes past what c10d numbers (and past int64 for the first): refused before any
  // size is multiplied (UBSan found the overflow through fuzz.topology).
  for (const std::string huge :
       {"dp=4294967296,cp=4294967296,tp=4294967296", "dp=65536,cp=32768",
        "n_ci=2,n_per_block=3037000500,n_blocks=3037000500", "n_ci=2147483647,n_per_block=1"}) {
    EXPECT_NE(error_of(huge).find("a world of more than the 2147483647 ranks c10d can number"), std::string::npos)
        << huge;
  }
  EXPECT_NE(error_of("dp=2,mb=4611686018427387904").find("is more than 2147483647 micro-batches"), std::string::npos);
  EXPECT_EQ(error_of("dp=65536,cp=32767"), "");  // 2^31 - 65536 ranks: a world c10d can number
  EXPECT_NE(error_of("dq=2").find(
                "keys from: dp, cp, tp, fsdp, sp, mb, pp, vpp, cp_impl, n_ci, n_per_block, n_blocks, n_ppgd"),
            std::string::npos);
  EXPECT_NE(error_of("dp=2,vpp=2").find("vpp=2 needs pp > 1"), std::string::npos);
  EXPECT_NE(error_of("pp=2,n_ci=2,n_per_block=1").find("pp cannot be combined"), std::string::npos);
  EXPECT_NE(error_of("pp=65536,dp=32768").find("a world of more than"), std::string::npos);
  EXPECT_NE(error_of("cp=2,cp_impl=ringg").find("cp_impl=ringg: expected gather or ring"), std::string::npos);
  EXPECT_NE(error_of("dp=2,cp_impl=ring").find("cp_impl=ring needs cp > 1"), std::string::npos);
  EXPECT_NE(error_of("cp=2,tp=2,sp,cp_impl=ring").find("cp_impl=ring with sp is not supported yet"), std::string::npos);
}

TEST(Topology, ParsesPipelineStagesOutermost) {
  const auto t = TopologySpec::parse("vpp=2,mb=4,pp=3,tp=2,dp=2");
  EXPECT_EQ(t.pp(), 3);
  EXPECT_EQ(t.vpp(), 2);
  EXPECT_EQ(t.world_size(), 12);  // pp * dp * cp * tp: virtual stages are chunks, not ranks
  EXPECT_EQ(t.str(), "dp=2,tp=2,pp=3,vpp=2,mb=4");
  EXPECT_EQ(TopologySpec::parse(t.str()).str(), t.str());
  EXPECT_EQ(TopologySpec::parse("dp=2").pp(), 1);
  EXPECT_EQ(t.schedule, "1f1b");
  const auto ring = TopologySpec::parse("cp_impl=ring,cp=2,dp=2");
  EXPECT_TRUE(ring.ring());
  EXPECT_EQ(ring.str(), "dp=2,cp=2,cp_impl=ring");
  EXPECT_EQ(ring.world_size(), 4);
  EXPECT_FALSE(TopologySpec::parse("cp=2,cp_impl=gather").ring());
  EXPECT_EQ(TopologySpec::parse("cp=2,cp_impl=gather").str(), "dp=1,cp=2");
}

TEST(Topology, ParsesTensorParallelSequenceParallelAndMicroBatches) {
  const auto t = TopologySpec::parse("mb=3,sp,tp=2,cp=2,dp=2");
  EXPECT_EQ(t.tp(), 2);
  EXPECT_TRUE(t.sp());
  EXPECT_EQ(t.mb(), 3);
  EXPECT_EQ(t.world_size(), 8);  // dp * cp * tp: micro-batches are a step option, not ranks
  EXPECT_EQ(t.str(), "dp=2,cp=2,tp=2,sp,mb=3");
  EXPECT_EQ(TopologySpec::parse(t.str()).str(), t.str());
  EXPECT_FALSE(TopologySpec::parse("tp=4").sp());
  EXPECT_EQ(TopologySpec::parse("tp=4").mb(), 1);
}

RC_GTEST_PROP(Topology, EveryPositiveDpRoundTrips, ()) {
  const int64_t dp = *rc::gen::inRange<int64_t>(1, 100000);
  const auto t = TopologySpec::parse("dp=" + std::to_string(dp));
  RC_ASSERT(t.dp() == dp);
  RC_ASSERT(TopologySpec::parse(t.str()).dp() == dp);
}

RC_GTEST_PROP(Shards, ContiguousCoverEverythingOnceAndDifferByAtMostOne, ()) {
  const int64_t total = *rc::gen::inRange<int64_t>(0, 500);
  const int size = *rc::gen::inRange(1, 40);
  int64_t expected_begin = 0, smallest = total, largest = 0;
  for (int r = 0; r < size; ++r) {
    auto [begin, end] = dist::shard_range(total, r, size);
    RC_ASSERT(begin == expected_begin);
    RC_ASSERT(end >= begin);
    smallest = std::min(smallest, end - begin);
    largest = std::max(largest, end - begin);
    expected_begin = end;
  }
  RC_ASSERT(expected_begin == total);
  RC_ASSERT(largest - smallest <= 1);
}

}  // namespace
}  // namespace magic
