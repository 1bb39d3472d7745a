// MeshLayout: where each rank sits in a pp x dp x cp x tp mesh whose parameters are sharded fsdp
// ways (docs/magic-check.md, "Mesh: context parallel and sharded parameters").
// Rank order: tp varies fastest, then cp, then dp, then pp (Megatron's order):
//   rank = ((pp_index * dp + dp_index) * cp + cp_index) * tp + tp_index.
// Groups of a rank (pp_index p, dp_index d, cp_index c, tp_index t); all but the last two lie
// within the rank's pipeline stage p:
//   tp group         {(p, d, c, t') : every t'}                     tensor-parallel collectives
//   cp group         {(p, d, c', t) : every c'}                     K/V gather of attention
//   shard group      {(p, d', c, t) : d' / fsdp = d / fsdp}         all_gather of parameter shards
//   replica group    {(p, d', c', t) : d' % fsdp = d % fsdp}        ranks holding the same shard
//   replica_tp group {(p, d', c', t') : d' % fsdp = d % fsdp}       the same for a parameter every tp
//                                                                   rank holds whole (sp sums it)
//   batch group      {(p, d', c', t) : every d', c'}                ranks splitting the batch's rows
//                                                                   and columns (loss sums)
//   pp group         {(p', d, c, t) : every p'}                     the pipeline: rank p' is stage p'
//   embedding group  {(0, d, c, t), (pp − 1, d, c, t)}              the first and last stage, which
//                                                                   hold a tied head's two copies
//                                                                   (a middle stage: itself alone)
// Shard index d % fsdp; with fsdp = 1 and tp = pp = 1 the replica group is the whole world (plain
// data parallelism), with fsdp = dp and cp = tp = 1 it is the rank's stage alone.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/distributed/runtime/runtime.h"
#include "lib/distributed/runtime/topology.h"

namespace magic::dist {

class MeshLayout {
 public:
  MeshLayout(int64_t dp, int64_t cp, int64_t fsdp, int64_t tp = 1, int64_t pp = 1);
  explicit MeshLayout(const TopologySpec& topology);

  int64_t dp() const { return dp_; }
  int64_t cp() const { return cp_; }
  int64_t fsdp() const { return fsdp_; }
  int64_t tp() const { return tp_; }
  int64_t pp() const { return pp_; }
  int world_size() const { return static_cast<int>(pp_ * dp_ * cp_ * tp_); }

  int rank_of(int64_t dp_index, int64_t cp_index, int64_t tp_index = 0, int64_t pp_index = 0) const {
    return static_cast<int>(((pp_index * dp_ + dp_index) * cp_ + cp_index) * tp_ + tp_index);
  }
  int64_t pp_index(int rank) const { return rank / tp_ / cp_ / dp_; }
  int64_t dp_index(int rank) const { return rank / tp_ / cp_ % dp_; }
  int64_t cp_index(int rank) const { return rank / tp_ % cp_; }
  int64_t tp_index(int rank) const { return rank % tp_; }
  int64_t shard_index(int rank) const { return dp_index(rank) % fsdp_; }

  // Members of the rank's groups, in group-rank order.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> cp_group(int rank) const;
  std::vector<int> shard_group(int rank) const;
  std::vector<int> replica_group(int rank) const;
  std::vector<int> replica_tp_group(int rank) const;
  std::vector<int> batch_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> embedding_group(int rank) const;

 private:
  int64_t dp_, cp_, fsdp_, tp_, pp_;
};

// This rank's groups of the mesh. Every rank of the world calls make_mesh_groups with the same
// layout (groups are created collectively, in one order; a second call with the same layout gets
// the same groups, Runtime::shared_group). A group of one rank is nullptr (its
// collectives are identities); one that spans the world is the world group.
struct MeshGroups {
  MeshLayout layout{1, 1, 1};
  int rank = 0;
  std::shared_ptr<const Group> world, tp, cp, shard, replica, replica_tp, batch, pp, embedding;
};
MeshGroups make_mesh_groups(const Runtime& runtime, const MeshLayout& layout);

// This rank's group of a partition of the world: members_of(r) is rank r's part, in group-rank
// order, the same on every rank. Collective: every rank calls it, in the same order of calls.
// nullptr for a part of one rank, the world group for the whole world.
std::shared_ptr<const Group> partition_group(const Runtime& runtime, const std::string& kind,
                                             const std::function<std::vector<int>(int)>& members_of);

}  // namespace magic::dist
