// BridgeLayout: where each rank of a colocated encoder and language model sits on both sides,
// and the groups the bridge between them uses (docs/magic-check.md, "Encoder and language model:
// the bridge"). Both sides order ranks as mesh_layout.h does (tp fastest, dp slowest):
//   encoder rank = b·A + a                  (b: encoder dp index, a: encoder tp index)
//   lm rank      = (d·E + e)·C + c          (d: lm dp index, e: cp index, c: lm tp index)
// so the N/D ranks of one lm dp index are a contiguous block, and so are the N/B of one encoder dp
// index. With B > D (fan-in) an lm block holds B/D whole encoder blocks, the encoder shards its
// rows are; with B < D (fan-out) an encoder block holds D/B lm blocks, each taking a slice of
// its shard. Bridge group of a rank:
//   fan-in   {same lm dp index, same encoder tp index}   B/D ranks, one per encoder shard, in
//                                                       encoder-dp order: gather_from_group
//   fan-out  {same encoder dp index, lm tp, cp index}    D/B ranks, one per lm dp index, in
//                                                       lm-dp order: split_to_group
//   equal    the rank alone
// Every world rank is in exactly one bridge group of its kind.
#pragma once

#include <vector>

#include "lib/distributed/parallel/mesh_layout.h"
#include "lib/distributed/runtime/bridge_topology.h"

namespace magic::dist {

class BridgeLayout {
 public:
  explicit BridgeLayout(const BridgeTopology& topology);

  const BridgeTopology& topology() const { return topology_; }
  BridgeKind kind() const { return topology_.kind(); }
  int world_size() const { return encoder_.world_size(); }
  const MeshLayout& encoder() const { return encoder_; }  // dp B, cp 1, tp A
  const MeshLayout& lm() const { return lm_; }            // dp D, cp E, tp C

  // The bridge group's members (the rank alone when the sides' dp sizes are equal).
  std::vector<int> bridge_group(int rank) const;
  // The global batch's rows of a side's dp index, [first, first + count), for `rows` rows that
  // check_batch accepted.
  std::pair<int64_t, int64_t> encoder_rows(int rank, int64_t rows) const;
  std::pair<int64_t, int64_t> lm_rows(int rank, int64_t rows) const;

 private:
  BridgeTopology topology_;
  MeshLayout encoder_, lm_;
};

// This rank's groups of a bridge layout: each side's mesh groups and the bridge group
// (nullptr where it is the rank alone). Every rank calls it with the same layout.
struct BridgeGroups {
  MeshGroups encoder, lm;
  std::shared_ptr<const Group> bridge;
};
BridgeGroups make_bridge_groups(const Runtime& runtime, const BridgeLayout& layout);

}  // namespace magic::dist
