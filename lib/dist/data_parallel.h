// Data parallelism over a group of ranks (DESIGN.md section 4). The global batch is split into
// contiguous shards, sizes differing by at most one (uneven splits allowed; a rank may get none).
//   SUM convention: each rank's loss is its partial sum over the honest global count of valid
//                   labels; the gradient reduction is a SUM. Exact for any split.
//   AVG convention: local mean, AVG reduction (SUM then / size). Exact only when every shard
//                   holds the same number of valid labels.
// The reduction happens in autograd: the local loss is evaluated on copy_to_group(θ) and
// differentiated with respect to the replicated θ, so the reduced gradient comes out of
// copy_to_group's backward (reduce_from_group) and stays differentiable for REPLAY and HVPs.
// checks/planted_variants.cpp derives the planted bugs of the mutation catalog from this class.
#pragma once

#include <memory>
#include <string>

#include "lib/dist/group.h"
#include "lib/train/data_parallelism.h"

namespace magic::dist {

enum class Convention { kSum, kAvg };
Convention parse_convention(const std::string& name);
std::string convention_name(Convention convention);

// The [begin, end) of shard `rank` when `total` items split over `size` ranks.
std::pair<int64_t, int64_t> shard_range(int64_t total, int rank, int size);

class DataParallel : public DataParallelism {
 public:
  DataParallel(std::shared_ptr<const Group> group, Convention convention);

  std::vector<int64_t> local_share(const std::vector<int64_t>& global) const override;
  double mean_denominator(double local_valid_labels) const override;
  TensorTree enter(const TensorTree& params) const override;
  TensorTree reduce_gradient(const TensorTree& grads) const override;
  TensorTree apply_convention(const TensorTree& grads) const override;
  at::Tensor sum_across_ranks(const at::Tensor& local) const override;
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override;

  const Group& group() const { return *group_; }
  Convention convention() const { return convention_; }

 private:
  std::shared_ptr<const Group> group_;
  Convention convention_;
};

}  // namespace magic::dist
