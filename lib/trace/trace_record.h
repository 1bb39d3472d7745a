// A trace record: one tensor a run made at a named trace point, with what it is and how this
// rank's piece makes up the whole across the ranks' mesh (docs/dump-format.md). The vocabulary of
// kinds, phases and orders is closed, so two implementations name the same tensor the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magic {

// How the pieces along one mesh dimension make up the whole (PyTorch DTensor's placements, plus
// the zig-zag pair context parallelism holds, the fused and padded shards tensor parallelism
// makes, and the coordinates that hold a piece at all: a pipeline stage's layers).
struct Placement {
  enum class Type { kReplicate, kShard, kZigzag, kPartial };
  enum class Reduce { kSum, kAvg };
  Type type = Type::kReplicate;
  int64_t dim = 0;               // kShard, kZigzag: the tensor dimension split
  Reduce reduce = Reduce::kSum;  // kPartial: what the pieces still need
  // kZigzag, kShard: the whole's length along dim, when the pieces were cut from a dimension padded
  // at its end (a sequence to a multiple of 2n, a vocabulary to a multiple of tp): the padding is
  // dropped; 0: the pieces make the whole.
  int64_t length = 0;
  // kShard: the dimension is `parts` equal consecutive parts (a fused q, k, v weight), each
  // sharded across the mesh dimension; every piece holds its shard of each part, in part order.
  int64_t parts = 1;
  // The coordinates along this mesh dimension that hold a piece, ascending; the others hold none
  // (a block's parameters live on one pipeline stage, a tied embedding on the first and the last).
  // Empty: every coordinate does.
  std::vector<int64_t> on = {};

  static Placement replicate() { return {}; }
  static Placement shard(int64_t dim, int64_t length = 0, int64_t parts = 1) {
    return {Type::kShard, dim, Reduce::kSum, length, parts, {}};
  }
  static Placement zigzag(int64_t dim, int64_t length = 0) { return {Type::kZigzag, dim, Reduce::kSum, length, 1, {}}; }
  static Placement partial(Reduce reduce) { return {Type::kPartial, 0, reduce, 0, 1, {}}; }
  // This placement held by the coordinates `coordinates` alone.
  Placement held_on(std::vector<int64_t> coordinates) const {
    Placement p = *this;
    p.on = std::move(coordinates);
    return p;
  }
};

// Whether a rank at `coords` holds a piece of a record placed as `placements`: on every mesh
// dimension that names its holders, the rank's coordinate is among them.
bool holds_piece(const std::vector<Placement>& placements, const std::vector<int64_t>& coords);

// "replicate", "shard(0)", "shard(0, 3 parts)", "shard(0, length 50)", "zigzag(1)",
// "zigzag(1, length 16)", "partial(sum)", "replicate on 0, 3".
std::string placement_text(const Placement& p);

struct MeshDim {
  std::string name;  // "dp", "cp", "fsdp"
  int64_t size = 1;
};

struct TraceRecord {
  std::string name;                   // "blocks.1.attn.qkv.weight", "hidden", "loss"
  std::string kind;                   // one of trace_kinds()
  std::string phase;                  // one of trace_phases()
  std::string order;                  // one of trace_orders()
  int64_t step = -1;                  // -1: no training step (the query, the final scores)
  std::string layer;                  // "blocks.1", or ""
  std::vector<Placement> placements;  // one per mesh dimension; empty in a single process
  int64_t micro_batch = -1;           // the micro-batch of a step it belongs to; -1: the whole step
  std::string mesh = "";              // the grid `placements` are on: "" the main one, or a named one
};

const std::vector<std::string>& trace_kinds();
const std::vector<std::string>& trace_phases();
const std::vector<std::string>& trace_orders();

// What makes two records the same tensor in two runs: name, kind, phase, order, step and micro-batch.
std::string record_identity(const TraceRecord& r);

// "step 0, backward, blocks.1.attn.qkv.weight gradient" (no step for step -1);
// "step 0, micro-batch 1, forward, loss" for a micro-batch's record.
std::string record_place(const TraceRecord& r);

}  // namespace magic
