// The reduction conventions of the three-pool step (three_pool_spd.h), as one object the step is
// given: where a pool's gradient is summed, which rank contributes a replicated term, how a
// global sum enters a nonlinear term, and how values replicated across pools are consumed. These
// are the correct ones; checks/planted_variants.cpp plants a known bug by overriding one method
// (docs/design.md, "Mutations enter through one seam": objects the pipeline is already given).
#pragma once

#include <ATen/ATen.h>

#include "lib/core/tensor_tree.h"
#include "lib/distributed/collectives/collectives.h"
#include "lib/distributed/pools/three_pool_layout.h"
#include "lib/distributed/runtime/group.h"

namespace magic::dist {

class ThreePoolConventions {
 public:
  virtual ~ThreePoolConventions() = default;

  // The importance term's global sum S = Σ_r local_r over the CI pool, as f(S) consumes it:
  // the differentiable all_reduce_sum, exact at every derivative order.
  virtual at::Tensor importance_sum(const at::Tensor& local, const Group& ci) const {
    return all_reduce_sum(local, ci);
  }
  // The coefficient of f(S) on a CI rank: contribute once, on the pool leader.
  virtual double importance_coefficient(bool leader) const { return leader ? 1.0 : 0.0; }

  // The gates as a consuming rank (block or PPGD) uses them.
  virtual at::Tensor consumed_gates(const at::Tensor& gates, const ThreePoolLayout&) const { return gates; }

  // The coefficient of the data-independent faithfulness term on a block rank: once per block.
  virtual double faithfulness_coefficient(bool leader) const { return leader ? 1.0 : 0.0; }

  // The share of its pool's ||g||² each rank adds to the clip's global norm (three_pool_spd.cpp):
  // the pool's ranks hold the same gradient, so each adds 1/n_pool of it.
  virtual double clip_squares_share(int64_t pool_size) const { return 1.0 / static_cast<double>(pool_size); }
  // The share of c's cotangent each rank passes into that sum's backward: each replica holds the
  // whole cotangent of its pool's use of c, so 1/n_pool of it.
  virtual double clip_cotangent_share(int64_t pool_size) const { return 1.0 / static_cast<double>(pool_size); }

  // The V/U replica as a PPGD rank uses it (received through the portals, one per PPGD rank).
  virtual TensorTree ppgd_components(const TensorTree& vu, const Group&) const { return vu; }

  // REPLAY's δw is the world's sum of every rank's: each pool's ranks hold disjoint rows of the
  // batch, so every term's derivative is counted once; the correct scale is 1.
  virtual double weight_gradient_scale(int world_size) const {
    (void)world_size;
    return 1.0;
  }

  // A pool's gradient after differentiation; the SUM over the pool already happened in autograd
  // (copy_to_group's backward), so the correct convention leaves it as it is.
  virtual TensorTree reduced_gradient(PoolRole, const TensorTree& grads, const ThreePoolLayout&) const { return grads; }
};

}  // namespace magic::dist
