// Tensor parallelism's pieces against single-process oracles:
//   - the plan: pattern matching, each split's pieces (worked out by hand) and their join back to
//     the whole, a vocabulary that tp does not divide padded as Megatron pads it;
//   - ranks as threads: the GPT's forward on tensor-parallel pieces with the vocabulary-parallel
//     loss (label smoothing on, a padded vocabulary) gives the single process's token losses, and
//     each rank's gradient is its piece of the single process's gradient; with sequence
//     parallelism a replicated parameter's gradient is partial on each rank and its sum over tp
//     is the single process's;
//   - the sums a reduction row judges against (DataParallel::sum_over_reduction_groups): each
//     parameter's over exactly the ranks its reduction adds, joined to the whole.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <mutex>

#include "lib/core/seed.h"
#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/parallel/mesh_layout.h"
#include "lib/distributed/parallel/tensor_parallel_group.h"
#include "lib/model/gpt.h"
#include "lib/model/vocab_parallel_loss.h"
#include "tests/support.h"

namespace magic {
namespace {

TEST(ParallelPlan, PatternsMatchOneDottedComponentPerStar) {
  EXPECT_TRUE(plan_pattern_matches("blocks.*.attn.qkv.weight", "blocks.12.attn.qkv.weight"));
  EXPECT_FALSE(plan_pattern_matches("blocks.*.attn.qkv.weight", "blocks.1.attn.qkv.bias"));
  EXPECT_FALSE(plan_pattern_matches("blocks.*.weight", "blocks.1.attn.weight"));
  EXPECT_EQ(split_of(gpt_parallel_plan(), "blocks.3.mlp.proj.weight"), TensorSplit::kRowwise);
  EXPECT_EQ(split_of(gpt_parallel_plan(), "blocks.3.mlp.proj.bias"), TensorSplit::kReplicated);
  EXPECT_EQ(split_of(gpt_parallel_plan(), "ln_f.weight"), TensorSplit::kReplicated);
  EXPECT_EQ(split_of(gpt_parallel_plan(), "tok_emb"), TensorSplit::kVocabulary);
}

// V = 11 over tp = 4: padded to 12, 3 rows each; rank 3 holds row 9, 10 and one of padding.
TEST(ParallelPlan, VocabularyShardsPadToAMultipleOfTp) {
  const VocabShard last = vocab_shard(11, 4, 3);
  EXPECT_EQ(last.local, 3);
  EXPECT_EQ(last.begin, 9);
  EXPECT_EQ(last.real, 2);
  EXPECT_EQ(vocab_shard(11, 4, 0).real, 3);
  EXPECT_EQ(vocab_shard(2, 4, 3).real, 0);  // a rank may hold only padding
  const at::Tensor table = at::arange(11, at::kDouble).view({11, 1});
  const at::Tensor piece = tensor_parallel_piece(table, TensorSplit::kVocabulary, 4, 3);
  EXPECT_TRUE(at::equal(piece.view({-1}), at::tensor({9.0, 10.0, 0.0}, at::kDouble)));
}

// qkv rows q0 q1 q2 q3 | k0 .. k3 | v0 .. v3 over tp = 2: rank 1 holds q2 q3 k2 k3 v2 v3.
TEST(ParallelPlan, FusedQkvSplitsEachOfQKAndVByHeads) {
  const at::Tensor qkv = at::arange(12, at::kDouble).view({12, 1});
  const at::Tensor piece = tensor_parallel_piece(qkv, TensorSplit::kColumnwiseQkv, 2, 1);
  EXPECT_TRUE(at::equal(piece.view({-1}), at::tensor({2.0, 3.0, 6.0, 7.0, 10.0, 11.0}, at::kDouble)));
}

TEST(ParallelPlan, PiecesJoinBackToTheWhole) {
  at::Generator gen = make_generator(4);
  const at::Tensor t = at::randn({12, 8}, gen, at::kDouble);
  for (TensorSplit split : {TensorSplit::kReplicated, TensorSplit::kColumnwise, TensorSplit::kColumnwiseQkv,
                            TensorSplit::kRowwise, TensorSplit::kVocabulary}) {
    for (int64_t tp : {1, 2, 4}) {
      std::vector<at::Tensor> pieces;
      for (int64_t i = 0; i < tp; ++i) pieces.push_back(tensor_parallel_piece(t, split, tp, i));
      EXPECT_TRUE(at::equal(join_tensor_parallel_pieces(pieces, split, 12), t)) << split_name(split) << " tp " << tp;
    }
  }
  const at::Tensor eleven = t.narrow(0, 0, 11);  // a vocabulary 4 does not divide
  std::vector<at::Tensor> pieces;
  for (int64_t i = 0; i < 4; ++i) pieces.push_back(tensor_parallel_piece(eleven, TensorSplit::kVocabulary, 4, i));
  EXPECT_TRUE(at::equal(join_tensor_parallel_pieces(pieces, TensorSplit::kVocabulary, 11), eleven));
}

GptConfig tiny(bool tied) {
  GptConfig c;
  c.vocab = 11;  // tp = 2 pads it to 12
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.max_len = 9;
  c.tied_head = tied;
  return c;
}

void expect_tensor_parallel_matches_single_process(const GptConfig& config, bool sequence_parallel) {
  constexpr int64_t kTp = 2;
  const TensorTree params = gpt_init(config, at::kDouble, 3);
  at::Generator gen = make_generator(9);
  const at::Tensor ids = at::randint(0, config.vocab, {3, 8}, gen, at::kLong);
  at::Tensor targets = at::randint(0, config.vocab, {3, 8}, gen, at::kLong);
  targets[1][2] = kIgnoreLabel;
  const at::Tensor weights = at::rand({3, 8}, gen, at::kDouble);
  const TokenLoss options{config.vocab, 0.1};

  TensorTree leaves = params.requires_grad();
  const at::Tensor whole_losses = position_losses(gpt_forward(config, leaves, ids), targets, options);
  const TensorTree whole_grad =
      with_values(leaves, torch::autograd::grad({(whole_losses * weights).sum()}, leaves.tensors()));

  std::mutex mutex;
  std::vector<TensorTree> rank_grads(kTp);
  dist::run_ranks_in_threads(kTp, [&](dist::Runtime& rt) {
    const dist::MeshGroups groups = dist::make_mesh_groups(rt, dist::MeshLayout(1, 1, 1, kTp));
    const int64_t index = rt.rank();
    // Under sp this rank's residual stream holds columns 4·index .. 4·index + 3.
    const ModelLayout layout{SequenceLayout::whole(8),
                             std::make_shared<dist::TensorParallelGroup>(groups.tp, sequence_parallel),
                             sequence_parallel ? at::arange(4 * index, 4 * index + 4, at::kLong) : at::Tensor(),
                             {}};
    TensorTree pieces = params.map_named([&](const std::string& name, const at::Tensor& p) {
      return tensor_parallel_piece(p, split_of(gpt_parallel_plan(), name), kTp, index);
    });
    pieces = pieces.requires_grad();
    const at::Tensor logits = gpt_forward(config, pieces, ids, layout);
    EXPECT_EQ(logits.size(-1), 6);  // this rank's padded vocabulary shard
    const at::Tensor losses = vocab_parallel_position_losses(logits, targets, options, *layout.tensor);
    const TensorTree grads = with_values(
        pieces, torch::autograd::grad({(losses * weights).sum()}, pieces.tensors(), {}, false, false, true));
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_LT(testing::relative_error(losses.detach(), whole_losses.detach()), 1e-13);
    rank_grads[index] = grads;
  });
  for (const auto& p : whole_grad) {
    const TensorSplit split = split_of(gpt_parallel_plan(), p.name);
    if (split == TensorSplit::kReplicated) {
      // Without sp every rank's gradient is whole; with sp each is a partial sum over its columns.
      at::Tensor sum = rank_grads[0].at(p.name) + rank_grads[1].at(p.name);
      const at::Tensor got = sequence_parallel ? sum : rank_grads[1].at(p.name);
      EXPECT_LT(testing::relative_error(got, p.tensor), 1e-12) << p.name;
      if (sequence_parallel) {
        EXPECT_GT(testing::relative_error(rank_grads[0].at(p.name), p.tensor), 1e-3) << p.name;
      }
      continue;
    }
    for (int64_t index = 0; index < kTp; ++index) {
      EXPECT_LT(
          testing::relative_error(rank_grads[index].at(p.name), tensor_parallel_piece(p.tensor, split, kTp, index)),
          1e-12)
          << p.name << " on tp rank " << index;
    }
  }
}

TEST(TensorParallel, LossesAndGradientPiecesEqualTheSingleProcess) {
  expect_tensor_parallel_matches_single_process(tiny(false), false);
}

TEST(TensorParallel, TiedHeadLossesAndGradientPiecesEqualTheSingleProcess) {
  expect_tensor_parallel_matches_single_process(tiny(true), false);
}

TEST(TensorParallel, SequenceParallelReplicatedGradientsArePartialSumsOverTp) {
  expect_tensor_parallel_matches_single_process(tiny(false), true);
}

// dp=2,tp=2,fsdp=2, with and without sp: rank (d, t) holds its piece of F times 1 + d, and F
// times (1 + d)(1 + t) for a replicated parameter. A piece sums over its batch group (d = 0, 1),
// 3·piece_t(F), joined: 3F over 2 ranks; a replicated parameter over the batch group without sp,
// 3(1 + t)F on tp rank t over 2 ranks, and over batch x tp under sp, 9F over 4 ranks.
TEST(TensorParallel, ReductionGroupsSumEachParameterOverTheRanksItsReductionAdds) {
  const GptConfig config = tiny(false);
  at::Generator gen = make_generator(5);
  const TensorTree full =  // every entry non-zero (gpt_init's biases are zeros)
      gpt_init(config, at::kDouble, 5).map([&](const at::Tensor& p) { return at::randn(p.sizes(), gen, at::kDouble); });
  for (const bool sequence_parallel : {false, true}) {
    dist::run_ranks_in_threads(4, [&](dist::Runtime& rt) {
      const dist::MeshLayout layout(2, 1, 2, 2);
      const dist::MeshParts parts =
          dist::mesh_parts(dist::make_mesh_groups(rt, layout), full, gpt_parallel_plan(), sequence_parallel);
      const dist::DataParallel parallel(parts, dist::Convention::kSum);
      const double d = static_cast<double>(layout.dp_index(rt.rank()));
      const int64_t t = layout.tp_index(rt.rank());
      const TensorTree local = full.map_named([&](const std::string& name, const at::Tensor& p) {
        const TensorSplit split = split_of(gpt_parallel_plan(), name);
        if (split == TensorSplit::kReplicated) return p * ((1 + d) * static_cast<double>(1 + t));
        return tensor_parallel_piece(p, split, 2, t) * (1 + d);
      });
      const ReductionGroupSums sums = parallel.sum_over_reduction_groups(local);
      for (const auto& p : full) {
        const bool replicated = split_of(gpt_parallel_plan(), p.name) == TensorSplit::kReplicated;
        const double times = !replicated ? 3.0 : sequence_parallel ? 9.0 : 3.0 * static_cast<double>(1 + t);
        EXPECT_LT(testing::relative_error(sums.whole.at(p.name), p.tensor * times), 1e-15)
            << p.name << " on rank " << rt.rank() << (sequence_parallel ? ", sp" : "");
        EXPECT_EQ(sums.ranks.at(p.name), replicated && sequence_parallel ? 4 : 2) << p.name;
      }
    });
  }
}

}  // namespace
}  // namespace magic
