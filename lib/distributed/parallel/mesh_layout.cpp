#include "lib/distributed/parallel/mesh_layout.h"

#include "lib/core/strings.h"

namespace magic::dist {

MeshLayout::MeshLayout(int64_t dp, int64_t cp, int64_t fsdp) : dp_(dp), cp_(cp), fsdp_(fsdp) {
  if (dp < 1 || cp < 1 || fsdp < 1 || dp % fsdp != 0) {
    throw std::invalid_argument(str_cat("MeshLayout: dp=", dp, ", cp=", cp, ", fsdp=", fsdp));
  }
}

MeshLayout::MeshLayout(const TopologySpec& topology) : MeshLayout(topology.dp(), topology.cp(), topology.fsdp()) {}

std::vector<int> MeshLayout::cp_group(int rank) const {
  std::vector<int> members;
  for (int64_t c = 0; c < cp_; ++c) members.push_back(rank_of(dp_index(rank), c));
  return members;
}

std::vector<int> MeshLayout::shard_group(int rank) const {
  std::vector<int> members;
  const int64_t first = dp_index(rank) / fsdp_ * fsdp_;
  for (int64_t d = first; d < first + fsdp_; ++d) members.push_back(rank_of(d, cp_index(rank)));
  return members;
}

std::vector<int> MeshLayout::replica_group(int rank) const {
  std::vector<int> members;
  for (int r = 0; r < world_size(); ++r) {
    if (shard_index(r) == shard_index(rank)) members.push_back(r);
  }
  return members;
}

MeshGroups make_mesh_groups(const Runtime& runtime, const MeshLayout& layout) {
  if (runtime.world_size() != layout.world_size()) {
    throw std::invalid_argument(
        str_cat("make_mesh_groups: world of ", runtime.world_size(), " ranks for a mesh of ", layout.world_size()));
  }
  MeshGroups g;
  g.layout = layout;
  g.rank = runtime.rank();
  g.world = runtime.world();
  // Every rank creates every group in rank order (shared_group is collective); each keeps its own.
  // A group of one rank is not created (nullptr: its collectives are identities), and a group
  // spanning the world is the world group.
  auto collect = [&](const std::string& kind, auto members_of) -> std::shared_ptr<const Group> {
    if (members_of(runtime.rank()).size() == 1) return nullptr;
    if (static_cast<int>(members_of(runtime.rank()).size()) == layout.world_size()) return runtime.world();
    std::shared_ptr<const Group> mine;
    int64_t created = 0;
    for (int r = 0; r < layout.world_size(); ++r) {
      const std::vector<int> members = members_of(r);
      if (members.front() != r) continue;  // each group once, on its first member's turn
      auto group = runtime.shared_group(str_cat(kind, "-", created++), members);
      if (group) mine = group;
    }
    return mine;
  };
  g.cp = collect("cp", [&](int r) { return layout.cp_group(r); });
  g.shard = collect("shard", [&](int r) { return layout.shard_group(r); });
  g.replica = collect("replica", [&](int r) { return layout.replica_group(r); });
  return g;
}

}  // namespace magic::dist
