// The mesh's distributed pieces against single-process oracles, ranks as threads:
//   - context parallel: each cp rank's logits from the zig-zag layout (K/V gathered over the cp
//     group) equal the whole-sequence gpt_forward's logits at its columns, and the derivative of
//     Σ logits·c (c a fixed random tensor) summed over ranks equals the single-process one;
//   - sharded parameters: shard then unshard is the identity, the gathered parameters are the
//     full ones, the differentiable gather's gradient is the full gradient's shard summed over
//     the ranks holding that shard, and the global norm is the full tensor's norm;
//   - pipeline groups: made collectively on every rank although the embedding group's parts
//     differ in size, each with the members MeshLayout names.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <mutex>

#include "lib/core/seed.h"
#include "lib/distributed/collectives/collectives.h"
#include "lib/distributed/parallel/context_parallel.h"
#include "lib/distributed/parallel/mesh_layout.h"
#include "lib/distributed/parallel/sharded_parameters.h"
#include "lib/model/gpt.h"
#include "tests/support.h"

namespace magic {
namespace {

GptConfig small_gpt() {
  GptConfig c;
  c.vocab = 11;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.max_len = 12;
  return c;
}

TEST(ContextParallel, ZigZagLogitsAndGradientsEqualTheWholeSequence) {
  const GptConfig config = small_gpt();
  const TensorTree params = gpt_init(config, at::kDouble, 5);
  at::Generator gen = make_generator(17);
  const int64_t T = 10;  // cp = 3 pads it to 12: 6 chunks of 2
  const at::Tensor ids = at::randint(0, config.vocab, {2, T}, gen, at::kLong);
  const at::Tensor cotangent = at::randn({2, 12, config.vocab}, gen, at::kDouble);

  // Oracle: the whole sequence, padded the same way (padding comes after every real position).
  TensorTree leaves = params.requires_grad();
  const at::Tensor padded = at::constant_pad_nd(ids, {0, 2}, 0);
  const at::Tensor whole = gpt_forward(config, leaves, padded.narrow(1, 0, T));
  const at::Tensor whole_loss = (whole * cotangent.narrow(1, 0, T)).sum();
  const TensorTree whole_grad = with_values(leaves, torch::autograd::grad({whole_loss}, leaves.tensors()));

  std::mutex mutex;
  std::vector<TensorTree> rank_grads(3);
  dist::run_ranks_in_threads(3, [&](dist::Runtime& rt) {
    const dist::MeshGroups groups = dist::make_mesh_groups(rt, dist::MeshLayout(1, 3, 1));
    const dist::ContextParallel cp(groups.cp);
    const SequenceLayout layout = cp.layout(T);
    ASSERT_EQ(layout.padded_length, 12);
    TensorTree local_params = params.requires_grad();
    const at::Tensor local_ids = padded.index_select(1, layout.columns);
    const at::Tensor logits =
        gpt_forward(config, local_params, local_ids, ModelLayout{layout, std::make_shared<SingleRank>(), {}, {}});
    // Only the real columns (< T) are compared: padding columns see the padding tokens.
    const at::Tensor real = layout.columns.lt(T).nonzero().squeeze(1);
    const at::Tensor expected = whole.detach().index_select(1, layout.columns.index_select(0, real));
    EXPECT_LT(testing::relative_error(logits.detach().index_select(1, real), expected), 1e-13);
    const at::Tensor c =
        cotangent.index_select(1, layout.columns) * layout.columns.lt(T).to(at::kDouble).view({1, -1, 1});
    const at::Tensor loss = (logits * c).sum();
    // Every rank differentiates at once (the backward's reduce-scatters are collective).
    const TensorTree grads =
        with_values(local_params, torch::autograd::grad({loss}, local_params.tensors(), {}, false, false, true));
    std::lock_guard<std::mutex> lock(mutex);
    rank_grads[rt.rank()] = grads;
  });
  for (const auto& p : whole_grad) {
    const at::Tensor summed = rank_grads[0].at(p.name) + rank_grads[1].at(p.name) + rank_grads[2].at(p.name);
    EXPECT_LT(testing::relative_error(summed, p.tensor), 1e-12) << p.name;
  }
}

TEST(ShardedParameters, GatherIsTheFullTensorAndItsGradientTheSummedShard) {
  at::Generator gen = make_generator(3);
  TensorTree full;
  full.insert("uneven", at::randn({7, 3}, gen, at::kDouble));  // 4 shards of 2, 2, 2, 1 rows
  full.insert("vector", at::randn({5}, gen, at::kDouble));     // 2, 2, 1, 0
  std::map<std::string, int64_t> rows{{"uneven", 7}, {"vector", 5}};
  const at::Tensor weight = at::randn({7, 3}, gen, at::kDouble);

  // dp=4, cp=2, fsdp=4 -> 8 ranks; each shard is held by the 2 cp ranks of one dp index.
  dist::run_ranks_in_threads(8, [&](dist::Runtime& rt) {
    const dist::MeshGroups groups = dist::make_mesh_groups(rt, dist::MeshLayout(4, 2, 4));
    const dist::ShardedParameters sharded(groups.shard, groups.replica);
    const TensorTree local = sharded.shard(full);
    const int64_t index = groups.layout.shard_index(rt.rank());
    auto [begin, end] = dist::chunk_range(7, index, 4);
    EXPECT_EQ(local.at("uneven").size(0), end - begin);
    const TensorTree back = sharded.unshard(local, rows);
    EXPECT_TRUE(at::equal(back.at("uneven"), full.at("uneven")));
    EXPECT_TRUE(at::equal(back.at("vector"), full.at("vector")));

    // L = Σ_ranks Σ weight·P: each of the 8 ranks contributes the same term, so dL/dP = 8·weight
    // and the shard's gradient is 8·weight[begin:end].
    TensorTree leaves = local.requires_grad();
    const TensorTree gathered = sharded.gather(leaves, rows);
    EXPECT_TRUE(at::equal(gathered.at("uneven").detach(), full.at("uneven")));
    const at::Tensor loss = (gathered.at("uneven") * weight).sum();
    const at::Tensor g = torch::autograd::grad({loss}, {leaves.at("uneven")})[0];
    EXPECT_LT(testing::relative_error(g, 8.0 * weight.narrow(0, begin, end - begin)), 1e-15);

    // The norm of the whole tensor from its shards.
    EXPECT_NEAR(sharded.sum_squares(dot(local, local)).sqrt().item<double>(), norm(full).item<double>(), 1e-13);
  });
}

// pp = 3, dp = 2 (6 ranks as threads): the groups are made collectively although the embedding
// group's parts differ in size (stage 0 and stage 2 paired, stage 1 alone); each group's sum of
// its members' rank numbers shows who is in it: the pipeline of rank r is {r % 2, r % 2 + 2,
// r % 2 + 4}, the embedding group of stage 0 and 2 ranks {r % 2, r % 2 + 4}.
TEST(MeshGroups, APipelinesGroupsSpanItsStagesAndTheEmbeddingGroupPairsItsEnds) {
  std::mutex mutex;
  std::vector<double> pipeline_sums(6), embedding_sums(6, -1.0);
  dist::run_ranks_in_threads(6, [&](dist::Runtime& rt) {
    const dist::MeshGroups groups = dist::make_mesh_groups(rt, dist::MeshLayout(2, 1, 1, 1, 3));
    const at::Tensor me = at::full({}, static_cast<double>(rt.rank()), at::kDouble);
    const double pipeline = groups.pp->sum(me).item<double>();
    const double embedding = groups.embedding ? groups.embedding->sum(me).item<double>() : -1.0;
    EXPECT_TRUE(groups.replica && groups.replica->size() == 2);  // the stage's two data-parallel ranks
    std::lock_guard<std::mutex> lock(mutex);
    pipeline_sums[static_cast<size_t>(rt.rank())] = pipeline;
    embedding_sums[static_cast<size_t>(rt.rank())] = embedding;
  });
  for (int r = 0; r < 6; ++r) {
    const int d = r % 2;
    EXPECT_EQ(pipeline_sums[static_cast<size_t>(r)], 3 * d + 6) << "rank " << r;
    EXPECT_EQ(embedding_sums[static_cast<size_t>(r)], r / 2 == 1 ? -1.0 : 2 * d + 4) << "rank " << r;
  }
}

}  // namespace
}  // namespace magic
