#include "lib/distributed/parallel/bridge_layout.h"

namespace magic::dist {

BridgeLayout::BridgeLayout(const BridgeTopology& topology)
    : topology_(topology),
      encoder_(topology.encoder.dp, 1, topology.encoder.fsdp, topology.encoder.tp),
      lm_(topology.lm.dp, topology.lm.cp, topology.lm.fsdp, topology.lm.tp) {}

std::vector<int> BridgeLayout::bridge_group(int rank) const {
  std::vector<int> members;
  for (int r = 0; r < world_size(); ++r) {
    bool member = r == rank;
    if (kind() == BridgeKind::kFanIn) {
      member = lm_.dp_index(r) == lm_.dp_index(rank) && encoder_.tp_index(r) == encoder_.tp_index(rank);
    } else if (kind() == BridgeKind::kFanOut) {
      member = encoder_.dp_index(r) == encoder_.dp_index(rank) && lm_.tp_index(r) == lm_.tp_index(rank) &&
               lm_.cp_index(r) == lm_.cp_index(rank);
    }
    if (member) members.push_back(r);
  }
  return members;
}

namespace {

// The rows of `rank`'s dp index when `rows` split evenly over a side's dp ranks.
std::pair<int64_t, int64_t> shard_rows(const MeshLayout& side, int rank, int64_t rows) {
  const int64_t shard = rows / side.dp();
  return {side.dp_index(rank) * shard, shard};
}

}  // namespace

std::pair<int64_t, int64_t> BridgeLayout::encoder_rows(int rank, int64_t rows) const {
  return shard_rows(encoder_, rank, rows);
}

std::pair<int64_t, int64_t> BridgeLayout::lm_rows(int rank, int64_t rows) const {
  return shard_rows(lm_, rank, rows);
}

BridgeGroups make_bridge_groups(const Runtime& runtime, const BridgeLayout& layout) {
  BridgeGroups g;
  g.encoder = make_mesh_groups(runtime, layout.encoder());
  g.lm = make_mesh_groups(runtime, layout.lm());
  g.bridge = partition_group(runtime, "bridge", [&](int r) { return layout.bridge_group(r); });
  return g;
}

}  // namespace magic::dist
