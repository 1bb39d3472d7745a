// Sharded parameters (docs/magic-check.md, "Sharded parameters (`fsdp`)"): every parameter is
// stored as a dim-0 shard on each rank of its shard group, torch.chunk style (shards of
// ceil(n / fsdp) rows, the last non-empty one possibly shorter, any after it empty); the optimizer
// state is sharded alike because it is built from the stored parameters, and the update runs on
// shards.
// Before use a shard enters through
//   full = all_gather_shard(copy_to_group(shard, replica group))
// whose backward is a reduce_scatter_sum within the shard group, then a sum across the ranks
// that hold the same shard (other replicas and the cp ranks). Both are the differentiable
// collectives, so REPLAY and HVPs differentiate through them at every order (the failure that
// pytorch#160509 fixed for DTensor). With fsdp = 1 a parameter is one whole shard and this is
// plain data parallelism. checks/planted_variants.cpp derives the fsdp mutations from this class.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "lib/core/tensor_tree.h"
#include "lib/distributed/runtime/group.h"

namespace magic::dist {

// [begin, end) of shard `index` of `count` over `rows` rows (torch.chunk's split).
std::pair<int64_t, int64_t> chunk_range(int64_t rows, int64_t index, int64_t count);

class ShardedParameters {
 public:
  // `shard`: the ranks splitting each parameter; `replica`: the ranks holding the same shard
  // (nullptr: a group of this rank alone).
  ShardedParameters(std::shared_ptr<const Group> shard, std::shared_ptr<const Group> replica);
  virtual ~ShardedParameters() = default;

  int64_t shards() const { return shard_ ? shard_->size() : 1; }
  const Group& shard_group() const { return *shard_; }
  const Group& replica_group() const { return *replica_; }

  // This rank's rows of each full parameter.
  TensorTree shard(const TensorTree& full) const;
  // Full parameters from every rank's shards, outside autograd; `full_rows` of each by name.
  TensorTree unshard(const TensorTree& local, const std::map<std::string, int64_t>& full_rows) const;
  // Differentiable: the full parameters for computation, as in the header comment.
  TensorTree gather(const TensorTree& local, const std::map<std::string, int64_t>& full_rows) const;
  // Σ over the shard group of each shard's `squares` (its Σ g²), the same on every rank; the
  // derivative stays on this rank (reduce_from_group), and enter_coefficient sums it instead.
  virtual at::Tensor sum_squares(const at::Tensor& squares) const;
  // A clip coefficient c as it scales this rank's shard: c's derivative sums the shards' terms
  // over the shard group (copy_to_group), the pair of sum_squares.
  virtual at::Tensor enter_coefficient(const at::Tensor& coefficient) const;

 protected:
  // Sums the cotangent over the ranks holding this shard (identity forward).
  virtual at::Tensor enter_replicas(const at::Tensor& shard) const;
  // Padded shard -> concatenation of every rank's padded shard (backward: reduce_scatter_sum).
  // gather() calls the two above once, on all parameters flattened into one vector (each
  // parameter's shard padded to chunk_rows first).
  virtual at::Tensor all_gather_padded(const at::Tensor& padded) const;
  // Rows of each rank's padded shard of a parameter with `full_rows` rows: ceil(n / fsdp).
  int64_t chunk_rows(int64_t full_rows) const;

 private:
  // The full parameters from one flat all-gather of every parameter's padded shard, cut back
  // (gather() with the differentiable all_gather_padded, unshard() with a plain one).
  TensorTree gathered_bucket(const TensorTree& shards_tree, const std::map<std::string, int64_t>& full_rows,
                             const std::function<at::Tensor(const at::Tensor&)>& all_gather_flat) const;

  std::shared_ptr<const Group> shard_, replica_;
};

}  // namespace magic::dist
