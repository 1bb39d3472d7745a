// The mesh's pure pieces: topology keys and rules, the rank order (tp fastest, then cp, then dp) and the
// groups derived from it, the zig-zag split of a sequence and the dim-0 split of parameters.
// Expected values are worked out by hand from docs/magic-check.md,
// "Mesh: context parallel and sharded parameters", beside each test.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <set>

#include "lib/distributed/parallel/context_parallel.h"
#include "lib/distributed/parallel/mesh_layout.h"
#include "lib/distributed/parallel/sharded_parameters.h"
#include "tests/support.h"

namespace magic {
namespace {

using dist::MeshLayout;
using dist::TopologySpec;

TEST(MeshTopology, ParsesCpAndFsdpWithTheWorldOfDpTimesCp) {
  const auto t = TopologySpec::parse("dp=4,cp=2,fsdp=2");
  EXPECT_EQ(t.dp(), 4);
  EXPECT_EQ(t.cp(), 2);
  EXPECT_EQ(t.fsdp(), 2);
  EXPECT_EQ(t.world_size(), 8);
  EXPECT_EQ(t.str(), "dp=4,cp=2,fsdp=2");
  EXPECT_EQ(TopologySpec::parse("cp=4").str(), "dp=1,cp=4");  // dp defaults to 1
  EXPECT_EQ(TopologySpec::parse("fsdp=2,dp=2").str(), "dp=2,fsdp=2");
  EXPECT_EQ(TopologySpec::parse("dp=3,cp=1,fsdp=1").str(), "dp=3");
}

TEST(MeshTopology, FsdpMustDivideDp) {
  const std::string error = testing::input_error_of([] { TopologySpec::parse("dp=4,cp=2,fsdp=3"); });
  EXPECT_NE(error.find("fsdp=3 must divide dp=4"), std::string::npos) << error;
  EXPECT_NE(testing::input_error_of([] { TopologySpec::parse("cp=2,fsdp=2"); }).find("fsdp=2 must divide dp=1"),
            std::string::npos);
}

// dp=2, cp=3, fsdp=2: rank = 3·d + c, so rank 4 is (d=1, c=1).
TEST(MeshLayout, RanksAreCpFastestThenDp) {
  const MeshLayout mesh(2, 3, 2);
  EXPECT_EQ(mesh.world_size(), 6);
  EXPECT_EQ(mesh.rank_of(1, 1), 4);
  EXPECT_EQ(mesh.dp_index(4), 1);
  EXPECT_EQ(mesh.cp_index(4), 1);
  EXPECT_EQ(mesh.cp_group(4), (std::vector<int>{3, 4, 5}));       // d = 1, every c
  EXPECT_EQ(mesh.shard_group(4), (std::vector<int>{1, 4}));       // c = 1, d in {0, 1}
  EXPECT_EQ(mesh.replica_group(4), (std::vector<int>{3, 4, 5}));  // shard index d % 2 = 1: d = 1, every c
}

// dp=4, cp=1, fsdp=2 (hybrid): shard groups {0,1}, {2,3}; replicas hold shard d % 2.
TEST(MeshLayout, HybridShardingSplitsDpIntoShardGroupsAndReplicas) {
  const MeshLayout mesh(4, 1, 2);
  EXPECT_EQ(mesh.shard_group(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(mesh.shard_group(3), (std::vector<int>{2, 3}));
  EXPECT_EQ(mesh.replica_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(mesh.replica_group(3), (std::vector<int>{1, 3}));
  // fsdp = 1: one replica group, the world; fsdp = dp, cp = 1: every rank alone.
  EXPECT_EQ(MeshLayout(3, 1, 1).replica_group(2), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(MeshLayout(3, 1, 3).replica_group(2), (std::vector<int>{2}));
}

// dp=2, cp=2, fsdp=2, tp=3: rank = (2·d + c)·3 + t, so rank 10 is (d=1, c=1, t=1).
TEST(MeshLayout, RanksAreTpFastestThenCpThenDp) {
  const MeshLayout mesh(2, 2, 2, 3);
  EXPECT_EQ(mesh.world_size(), 12);
  EXPECT_EQ(mesh.rank_of(1, 1, 1), 10);
  EXPECT_EQ(mesh.dp_index(10), 1);
  EXPECT_EQ(mesh.cp_index(10), 1);
  EXPECT_EQ(mesh.tp_index(10), 1);
  EXPECT_EQ(mesh.tp_group(10), (std::vector<int>{9, 10, 11}));                   // d = 1, c = 1, every t
  EXPECT_EQ(mesh.cp_group(10), (std::vector<int>{7, 10}));                       // d = 1, t = 1, every c
  EXPECT_EQ(mesh.shard_group(10), (std::vector<int>{4, 10}));                    // c = 1, t = 1, d in {0, 1}
  EXPECT_EQ(mesh.replica_group(10), (std::vector<int>{7, 10}));                  // shard index 1, t = 1, every c
  EXPECT_EQ(mesh.replica_tp_group(10), (std::vector<int>{6, 7, 8, 9, 10, 11}));  // shard index 1
  EXPECT_EQ(mesh.batch_group(10), (std::vector<int>{1, 4, 7, 10}));              // t = 1, every d and c
}

RC_GTEST_PROP(MeshLayout, EveryGroupFamilyPartitionsTheWorld, ()) {
  const int64_t fsdp = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t dp = fsdp * *rc::gen::inRange<int64_t>(1, 4);
  const int64_t cp = *rc::gen::inRange<int64_t>(1, 5);
  const int64_t tp = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t pp = *rc::gen::inRange<int64_t>(1, 4);
  const MeshLayout mesh(dp, cp, fsdp, tp, pp);
  for (auto members_of :
       {&MeshLayout::tp_group, &MeshLayout::cp_group, &MeshLayout::shard_group, &MeshLayout::replica_group,
        &MeshLayout::replica_tp_group, &MeshLayout::batch_group, &MeshLayout::pp_group, &MeshLayout::embedding_group}) {
    for (int r = 0; r < mesh.world_size(); ++r) {
      const std::vector<int> members = (mesh.*members_of)(r);
      RC_ASSERT(std::find(members.begin(), members.end(), r) != members.end());
      for (int m : members) RC_ASSERT((mesh.*members_of)(m) == members);  // the same group from every member
    }
  }
  RC_ASSERT(static_cast<int64_t>(mesh.cp_group(0).size()) == cp);
  RC_ASSERT(static_cast<int64_t>(mesh.shard_group(0).size()) == fsdp);
  RC_ASSERT(static_cast<int64_t>(mesh.replica_group(0).size()) == dp / fsdp * cp);
  RC_ASSERT(static_cast<int64_t>(mesh.replica_tp_group(0).size()) == dp / fsdp * cp * tp);
  RC_ASSERT(static_cast<int64_t>(mesh.tp_group(0).size()) == tp);
  RC_ASSERT(static_cast<int64_t>(mesh.batch_group(0).size()) == dp * cp);
  RC_ASSERT(static_cast<int64_t>(mesh.pp_group(0).size()) == pp);
  RC_ASSERT(mesh.embedding_group(0).size() == (pp > 1 ? 2u : 1u));
  // Every group but the pipeline's and the embedding's stays within one stage.
  for (int r = 0; r < mesh.world_size(); ++r) {
    for (int m : mesh.batch_group(r)) RC_ASSERT(mesh.pp_index(m) == mesh.pp_index(r));
    for (int m : mesh.replica_tp_group(r)) RC_ASSERT(mesh.pp_index(m) == mesh.pp_index(r));
    for (int m : mesh.cp_group(r)) RC_ASSERT(mesh.pp_index(m) == mesh.pp_index(r));
    for (int m : mesh.shard_group(r)) RC_ASSERT(mesh.pp_index(m) == mesh.pp_index(r));
  }
}

// pp = 2, dp = 2, tp = 2: rank = (2·p + d)·2 + t, so rank 5 is (p = 1, d = 0, t = 1).
TEST(MeshLayout, StagesComeLastInTheRankOrderAndPairTheirEnds) {
  const MeshLayout mesh(2, 1, 1, 2, 2);
  EXPECT_EQ(mesh.world_size(), 8);
  EXPECT_EQ(mesh.rank_of(0, 0, 1, 1), 5);
  EXPECT_EQ(mesh.pp_index(5), 1);
  EXPECT_EQ(mesh.dp_index(5), 0);
  EXPECT_EQ(mesh.tp_index(5), 1);
  EXPECT_EQ(mesh.tp_group(5), (std::vector<int>{4, 5}));         // p = 1, d = 0, every t
  EXPECT_EQ(mesh.replica_group(5), (std::vector<int>{5, 7}));    // p = 1, t = 1, every d
  EXPECT_EQ(mesh.batch_group(5), (std::vector<int>{5, 7}));      // the same rows' split, stage 1 only
  EXPECT_EQ(mesh.pp_group(5), (std::vector<int>{1, 5}));         // d = 0, t = 1, every p
  EXPECT_EQ(mesh.embedding_group(5), (std::vector<int>{1, 5}));  // stages 0 and 1: the ends
  // pp = 3: the middle stage holds no copy of a tied embedding.
  const MeshLayout three(1, 1, 1, 1, 3);
  EXPECT_EQ(three.pp_group(1), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(three.embedding_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(three.embedding_group(1), (std::vector<int>{1}));
  EXPECT_EQ(three.embedding_group(2), (std::vector<int>{0, 2}));
}

// T = 16, cp = 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
TEST(ZigZag, RankRHoldsChunksRAndTwoCpMinusOneMinusR) {
  EXPECT_TRUE(at::equal(dist::zigzag_columns(16, 2, 0), at::tensor({0, 1, 2, 3, 12, 13, 14, 15}, at::kLong)));
  EXPECT_TRUE(at::equal(dist::zigzag_columns(16, 2, 1), at::tensor({4, 5, 6, 7, 8, 9, 10, 11}, at::kLong)));
  EXPECT_EQ(dist::cp_padded_length(16, 3), 18);  // 6 chunks of 3
  EXPECT_EQ(dist::cp_padded_length(12, 3), 12);
}

RC_GTEST_PROP(ZigZag, ColumnsCoverThePaddedSequenceOnceWithBalancedCausalWork, ()) {
  const int64_t cp = *rc::gen::inRange<int64_t>(1, 9);
  const int64_t length = *rc::gen::inRange<int64_t>(2 * cp, 200);
  const int64_t padded = dist::cp_padded_length(length, cp);
  RC_ASSERT(padded % (2 * cp) == 0);
  RC_ASSERT(padded >= length && padded < length + 2 * cp);
  std::set<int64_t> seen;
  std::vector<int64_t> work;  // Σ (position + 1): the keys each rank's queries attend to
  for (int64_t r = 0; r < cp; ++r) {
    const at::Tensor columns = dist::zigzag_columns(padded, cp, r);
    RC_ASSERT(columns.size(0) == padded / cp);
    for (int64_t j = 0; j < columns.size(0); ++j) seen.insert(columns[j].item<int64_t>());
    work.push_back((columns + 1).sum().item<int64_t>());
  }
  RC_ASSERT(static_cast<int64_t>(seen.size()) == padded);
  RC_ASSERT(*std::min_element(work.begin(), work.end()) == *std::max_element(work.begin(), work.end()));
}

// torch.chunk(257 rows, 4): 65, 65, 65, 62; chunk(5, 4): 2, 2, 1, 0.
TEST(ShardedParameters, ChunkRangesFollowTorchChunk) {
  EXPECT_EQ(dist::chunk_range(257, 3, 4), (std::pair<int64_t, int64_t>{195, 257}));
  EXPECT_EQ(dist::chunk_range(5, 2, 4), (std::pair<int64_t, int64_t>{4, 5}));
  EXPECT_EQ(dist::chunk_range(5, 3, 4), (std::pair<int64_t, int64_t>{5, 5}));
}

RC_GTEST_PROP(ShardedParameters, ChunksCoverEveryRowOnceInOrder, ()) {
  const int64_t rows = *rc::gen::inRange<int64_t>(1, 300);
  const int64_t count = *rc::gen::inRange<int64_t>(1, 9);
  int64_t next = 0;
  for (int64_t i = 0; i < count; ++i) {
    auto [begin, end] = dist::chunk_range(rows, i, count);
    RC_ASSERT(begin == next);
    RC_ASSERT(end - begin <= (rows + count - 1) / count);
    next = end;
  }
  RC_ASSERT(next == rows);
}

}  // namespace
}  // namespace magic
