#include "lib/distributed/parallel/mesh_layout.h"

#include <functional>
#include <map>

#include "lib/core/strings.h"

namespace magic::dist {

MeshLayout::MeshLayout(int64_t dp, int64_t cp, int64_t fsdp, int64_t tp, int64_t pp)
    : dp_(dp), cp_(cp), fsdp_(fsdp), tp_(tp), pp_(pp) {
  if (dp < 1 || cp < 1 || fsdp < 1 || tp < 1 || pp < 1 || dp % fsdp != 0) {
    throw std::invalid_argument(str_cat("MeshLayout: dp=", dp, ", cp=", cp, ", fsdp=", fsdp, ", tp=", tp, ", pp=", pp));
  }
}

MeshLayout::MeshLayout(const TopologySpec& topology)
    : MeshLayout(topology.dp(), topology.cp(), topology.fsdp(), topology.tp(), topology.pp()) {}

namespace {

std::vector<int> members_where(const MeshLayout& layout, const std::function<bool(int)>& member) {
  std::vector<int> members;
  for (int r = 0; r < layout.world_size(); ++r) {
    if (member(r)) members.push_back(r);
  }
  return members;
}

}  // namespace

std::vector<int> MeshLayout::tp_group(int rank) const {
  return members_where(*this, [&](int r) { return r / tp_ == rank / tp_; });
}

std::vector<int> MeshLayout::cp_group(int rank) const {
  return members_where(*this, [&](int r) {
    return pp_index(r) == pp_index(rank) && dp_index(r) == dp_index(rank) && tp_index(r) == tp_index(rank);
  });
}

std::vector<int> MeshLayout::shard_group(int rank) const {
  return members_where(*this, [&](int r) {
    return pp_index(r) == pp_index(rank) && dp_index(r) / fsdp_ == dp_index(rank) / fsdp_ &&
           cp_index(r) == cp_index(rank) && tp_index(r) == tp_index(rank);
  });
}

std::vector<int> MeshLayout::replica_group(int rank) const {
  return members_where(*this, [&](int r) {
    return pp_index(r) == pp_index(rank) && shard_index(r) == shard_index(rank) && tp_index(r) == tp_index(rank);
  });
}

std::vector<int> MeshLayout::replica_tp_group(int rank) const {
  return members_where(*this,
                       [&](int r) { return pp_index(r) == pp_index(rank) && shard_index(r) == shard_index(rank); });
}

std::vector<int> MeshLayout::batch_group(int rank) const {
  return members_where(*this, [&](int r) { return pp_index(r) == pp_index(rank) && tp_index(r) == tp_index(rank); });
}

std::vector<int> MeshLayout::pp_group(int rank) const {
  // The ranks of the other stages at this rank's place within its stage.
  const int stage_size = static_cast<int>(dp_ * cp_ * tp_);
  return members_where(*this, [&](int r) { return r % stage_size == rank % stage_size; });
}

std::vector<int> MeshLayout::embedding_group(int rank) const {
  const int64_t p = pp_index(rank);
  if (pp_ == 1 || (p != 0 && p != pp_ - 1)) return {rank};
  const std::vector<int> pipeline = pp_group(rank);
  return {pipeline.front(), pipeline.back()};
}

std::shared_ptr<const Group> partition_group(const Runtime& runtime, const std::string& kind,
                                             const std::function<std::vector<int>(int)>& members_of) {
  // Every rank creates every group in rank order (shared_group is collective); each keeps its own.
  // A group of one rank is not created (nullptr: its collectives are identities), and a group
  // spanning the world is the world group. Parts may differ in size (the embedding group: the
  // first and last stages paired, a middle stage alone), so every rank walks every part.
  const int world = runtime.world_size();
  if (static_cast<int>(members_of(runtime.rank()).size()) == world) return runtime.world();
  std::shared_ptr<const Group> mine;
  int64_t created = 0;
  for (int r = 0; r < world; ++r) {
    const std::vector<int> members = members_of(r);
    if (members.front() != r || members.size() == 1) continue;  // each group once, on its first member's turn
    auto group = runtime.shared_group(str_cat(kind, "-", created++), members);
    if (group) mine = group;
  }
  return mine;
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
  // Two families with the same members (replica and replica_tp when tp = 1) share one group.
  std::map<std::vector<int>, std::shared_ptr<const Group>> made;
  auto collect = [&](const std::string& kind, auto members_of) -> std::shared_ptr<const Group> {
    const std::vector<int> mine = members_of(runtime.rank());
    if (!made.count(mine)) made[mine] = partition_group(runtime, kind, members_of);
    return made.at(mine);
  };
  g.tp = collect("tp", [&](int r) { return layout.tp_group(r); });
  g.cp = collect("cp", [&](int r) { return layout.cp_group(r); });
  g.shard = collect("shard", [&](int r) { return layout.shard_group(r); });
  g.replica = collect("replica", [&](int r) { return layout.replica_group(r); });
  g.replica_tp = collect("replica_tp", [&](int r) { return layout.replica_tp_group(r); });
  g.batch = collect("batch", [&](int r) { return layout.batch_group(r); });
  g.pp = collect("pp", [&](int r) { return layout.pp_group(r); });
  g.embedding = collect("embedding", [&](int r) { return layout.embedding_group(r); });
  return g;
}

}  // namespace magic::dist
