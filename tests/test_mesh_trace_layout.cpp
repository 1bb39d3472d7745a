// The engine's own trace placements on a tensor-parallel mesh with sharded parameters
// (dist::mesh_trace_layout, docs/magic-check.md "First divergence"): every parameter of the
// built-in model, cut on each rank as the engine stores it (its tp piece by the plan, then that
// piece's fsdp chunk), reassembles by the placements its rank states to the whole parameter; the
// logits, split over the vocabulary with its padding, and the rows of an activation do too.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "lib/distributed/parallel/context_parallel.h"
#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/parallel/mesh_layout.h"
#include "lib/distributed/parallel/sharded_parameters.h"
#include "lib/model/gpt.h"
#include "lib/model/parallel_plan.h"
#include "lib/trace/reassemble.h"

namespace magic {
namespace {

// dp=4 (2 replicas of fsdp=2), tp=2: 8 ranks; rows of 5 over 4 dp indices (uneven, one holds 1).
const dist::MeshLayout kLayout(/*dp=*/4, /*cp=*/1, /*fsdp=*/2, /*tp=*/2);

std::vector<TraceLayout> every_rank(const TensorTree& whole) {
  std::map<std::string, int64_t> whole_rows;
  for (const auto& p : whole) whole_rows[p.name] = p.tensor.size(0);
  std::vector<TraceLayout> out;
  for (int r = 0; r < kLayout.world_size(); ++r) {
    out.push_back(dist::mesh_trace_layout(kLayout, r, dist::Convention::kSum, gpt_parallel_plan(), whole_rows, false));
  }
  return out;
}

std::vector<std::vector<int64_t>> coords_of(const std::vector<TraceLayout>& layouts) {
  std::vector<std::vector<int64_t>> coords;
  for (const auto& l : layouts) coords.push_back(l.coords);
  return coords;
}

TEST(MeshTraceLayout, TpBeforeFsdpAndEveryParameterReassemblesFromItsStoredPieces) {
  GptConfig config;
  config.vocab = 257;  // no tp divides it: the vocabulary's padding is cut
  config.d_model = 16;
  config.n_layers = 1;
  config.n_heads = 2;
  config.max_len = 8;
  const TensorTree whole = gpt_init(config, at::kDouble, 3);
  const std::vector<TraceLayout> layouts = every_rank(whole);
  const auto coords = coords_of(layouts);
  std::vector<std::string> names;
  for (const auto& d : layouts[0].mesh) names.push_back(d.name);
  EXPECT_EQ(names, (std::vector<std::string>{"replica", "cp", "tp", "fsdp"}));
  std::set<TensorSplit> splits;
  for (const auto& p : whole) {
    const TensorSplit split = split_of(gpt_parallel_plan(), p.name);
    splits.insert(split);
    std::vector<at::Tensor> pieces;
    for (int r = 0; r < kLayout.world_size(); ++r) {
      const at::Tensor piece = tensor_parallel_piece(p.tensor, split, kLayout.tp(), kLayout.tp_index(r));
      const auto [begin, end] = dist::chunk_range(piece.size(0), kLayout.shard_index(r), kLayout.fsdp());
      pieces.push_back(piece.narrow(0, begin, end - begin));
      EXPECT_EQ(placement_text(layouts[r].parameter(p.name).at(2)), placement_text(layouts[0].parameter(p.name)[2]))
          << p.name << " rank " << r;
    }
    const Reassembled back = reassemble(layouts[0].mesh, coords, pieces, layouts[0].parameter(p.name));
    EXPECT_TRUE(at::equal(back.whole, p.tensor)) << p.name;
    EXPECT_EQ(back.replicas_differ, "") << p.name;
  }
  // Every split of the plan was placed (the vocabulary, the fused qkv, colwise, rowwise, replicated).
  EXPECT_EQ(splits.size(), 5u);
  EXPECT_EQ(placement_text(layouts[0].parameter("tok_emb")[2]), "shard(0, length 257)");
  EXPECT_EQ(placement_text(layouts[0].parameter("blocks.0.attn.qkv.weight")[2]), "shard(0, 3 parts)");
  EXPECT_EQ(placement_text(layouts[0].parameter("blocks.0.attn.proj.weight")[2]), "shard(1)");
  EXPECT_EQ(placement_text(layouts[0].parameter("blocks.0.attn.proj.bias")[2]), "replicate");
}

TEST(MeshTraceLayout, LogitsSplitOverThePaddedVocabularyAndRowsOverTheDpIndexReassemble) {
  GptConfig config;
  config.vocab = 257;
  config.d_model = 16;
  config.n_layers = 1;
  config.n_heads = 2;
  const std::vector<TraceLayout> layouts = every_rank(gpt_init(config, at::kDouble, 0));
  const auto coords = coords_of(layouts);
  // [5 rows, 4 positions, 257]: dp index d holds rows shard_range(5, d, 4); tp t its 129 columns
  // of the vocabulary padded to 258 (tp 1's last is padding, here 7s that must be cut).
  const at::Tensor logits = at::arange(5 * 4 * 257, at::kDouble).reshape({5, 4, 257}).sin();
  const at::Tensor padded = at::cat({logits, at::full({5, 4, 1}, 7.0, at::kDouble)}, 2);
  std::vector<at::Tensor> pieces, rows;
  for (int r = 0; r < kLayout.world_size(); ++r) {
    const auto [begin, end] = dist::shard_range(5, static_cast<int>(kLayout.dp_index(r)), 4);
    rows.push_back(logits.narrow(0, begin, end - begin));
    pieces.push_back(padded.narrow(0, begin, end - begin).narrow(2, 129 * kLayout.tp_index(r), 129));
  }
  EXPECT_TRUE(at::equal(reassemble(layouts[0].mesh, coords, pieces, layouts[0].logits(4)).whole, logits));
  // Every other activation: the rows over the dp index, whole on every tp rank.
  const Reassembled activation = reassemble(layouts[0].mesh, coords, rows, layouts[0].activations(4));
  EXPECT_TRUE(at::equal(activation.whole, logits));
  EXPECT_EQ(activation.replicas_differ, "");
}

// Under sp the residual stream between blocks is a contiguous shard of each rank's columns over tp:
// with cp = 2 of the zig-zag pair a cp rank holds; with cp = 1 of the whole sequence padded to a
// multiple of 2·tp (a zig-zag over one cp rank cuts the padding). 7 positions: padded to 16 and 8.
TEST(MeshTraceLayout, UnderSpTheResidualStreamIsASequenceShardOverTp) {
  const at::Tensor stream = at::arange(3 * 7 * 4, at::kDouble).reshape({3, 7, 4}).cos();
  for (const dist::MeshLayout& layout : {dist::MeshLayout(1, 2, 1, 2), dist::MeshLayout(1, 1, 1, 2)}) {
    std::vector<TraceLayout> layouts;
    std::vector<std::vector<int64_t>> coords;
    std::vector<at::Tensor> pieces, columns;
    const int64_t padded = dist::cp_padded_length(7, layout.cp(), layout.tp());
    const at::Tensor whole = at::cat({stream, at::full({3, padded - 7, 4}, 7.0, at::kDouble)}, 1);
    for (int r = 0; r < layout.world_size(); ++r) {
      layouts.push_back(dist::mesh_trace_layout(layout, r, dist::Convention::kSum, gpt_parallel_plan(), {}, true));
      coords.push_back(layouts.back().coords);
      const at::Tensor local = whole.index_select(1, dist::zigzag_columns(padded, layout.cp(), layout.cp_index(r)));
      columns.push_back(local);
      const int64_t shard = local.size(1) / layout.tp();
      pieces.push_back(local.narrow(1, shard * layout.tp_index(r), shard));
    }
    const std::string name = "cp=" + std::to_string(layout.cp());
    const Reassembled back = reassemble(layouts[0].mesh, coords, pieces, layouts[0].residual(7));
    EXPECT_TRUE(at::equal(back.whole, stream)) << name;
    // The other activations (the input ids) stay whole on every tp rank.
    EXPECT_TRUE(at::equal(reassemble(layouts[0].mesh, coords, columns, layouts[0].activations(7)).whole, stream))
        << name;
    // Without sp the residual stream is placed as the other activations.
    const TraceLayout plain =
        dist::mesh_trace_layout(layout, 0, dist::Convention::kSum, gpt_parallel_plan(), {}, false);
    EXPECT_EQ(placement_text(plain.residual(7).at(2)), "replicate") << name;
  }
}

}  // namespace
}  // namespace magic
