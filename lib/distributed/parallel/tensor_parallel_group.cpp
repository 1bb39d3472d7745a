#include "lib/distributed/parallel/tensor_parallel_group.h"

#include "lib/distributed/collectives/collectives.h"

namespace magic::dist {

TensorParallelGroup::TensorParallelGroup(std::shared_ptr<const Group> tp, bool sequence_parallel)
    : tp_(std::move(tp)), sequence_parallel_(sequence_parallel) {
  if (!tp_) throw std::logic_error("TensorParallelGroup: no tp group (tp = 1 uses SingleRank)");
}

at::Tensor TensorParallelGroup::enter_column(const at::Tensor& x, int64_t sequence_dim) const {
  return sequence_parallel_ ? all_gather(x, *tp_, sequence_dim) : copy_to_group(x, *tp_);
}

at::Tensor TensorParallelGroup::leave_row(const at::Tensor& partial, int64_t sequence_dim) const {
  return sequence_parallel_ ? reduce_scatter_sum(partial, *tp_, sequence_dim) : reduce_from_group(partial, *tp_);
}

at::Tensor TensorParallelGroup::sum_replicated(const at::Tensor& partial) const {
  return reduce_from_group(partial, *tp_);
}

at::Tensor TensorParallelGroup::max(const at::Tensor& x) const {
  return tp_->all_gather(x.detach().unsqueeze(0).contiguous(), 0).amax(0);
}

}  // namespace magic::dist
