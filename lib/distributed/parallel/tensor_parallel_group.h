// The mesh's tensor-parallel operations (lib/model/tensor_parallel.h) over a tp group, from the
// differentiable collectives (collectives.h), so HVPs and REPLAY cross tensor-parallel ranks at
// every order (docs/magic-check.md, "Tensor parallel (`tp`)"):
//                     without sp                           with sp (sequence shards on dim d)
//   enter_column      copy_to_group (id / Σ)               all_gather along d (cat / reduce_scatter)
//   leave_row         reduce_from_group (Σ / id)           reduce_scatter_sum along d (reverse)
//   sum_replicated    reduce_from_group (Σ / id)           the same
// checks/planted_variants.cpp derives the tensor-parallel mutations from this class.
#pragma once

#include <memory>

#include "lib/distributed/runtime/group.h"
#include "lib/model/tensor_parallel.h"

namespace magic::dist {

class TensorParallelGroup : public TensorParallel {
 public:
  TensorParallelGroup(std::shared_ptr<const Group> tp, bool sequence_parallel);

  int64_t size() const override { return tp_->size(); }
  int64_t index() const override { return tp_->rank(); }
  at::Tensor enter_column(const at::Tensor& x, int64_t sequence_dim) const override;
  at::Tensor leave_row(const at::Tensor& partial, int64_t sequence_dim) const override;
  at::Tensor sum_replicated(const at::Tensor& partial) const override;
  at::Tensor max(const at::Tensor& x) const override;

  const Group& group() const { return *tp_; }
  bool sequence_parallel() const { return sequence_parallel_; }

 private:
  std::shared_ptr<const Group> tp_;
  bool sequence_parallel_;
};

}  // namespace magic::dist
