// The decomposition workload (lib/model/spd.h) on the three-pool layout (three_pool_layout.h),
// one rank's share. Each rank's state holds what its pool owns, plus the 0-dim "sync" parameter
// that anchors its portals (portal.h):
//   CI rank     θ_ci (every site's CI MLP), replicated over the CI pool
//   block rank  V/U of its block's sites, replicated over the block
//   PPGD rank   the adversarial sources (persistent state)
// One step: the CI pool computes the gates of its shard and the importance term, whose global
// sum goes through the differentiable all_reduce_sum with the term contributed once (the CI
// leader): exact at every derivative order, where a detached global residual would drop the
// second-order cross-rank terms. Gates portals carry each CI shard to the block and PPGD ranks
// holding the same rows. Each block computes the reconstruction of its sites and, on its leader
// only, the faithfulness term (contribute once), and sends its V/U to every PPGD rank (the
// leader's values, zeros from the others, so every rank of a block builds the same graph). The
// PPGD pool computes the PPGD term with that replica. Each pool reduces its parameters' gradient
// with a SUM (copy_to_group over the pool); cotangents cross pools back through the portals.
// The sources then climb the PPGD term by the sign of the PPGD pool's summed gradient. With
// clipping, ||g||² is one differentiable sum over every rank (each pool's leader contributing its
// pool's squares once), so REPLAY's backward carries the clip's derivative to every pool.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "lib/data/data_stream.h"
#include "lib/distributed/pools/pool_groups.h"
#include "lib/distributed/pools/pool_rows.h"
#include "lib/distributed/pools/three_pool_conventions.h"
#include "lib/distributed/pools/three_pool_layout.h"
#include "lib/model/spd.h"
#include "lib/optim/optimizer.h"
#include "lib/step/mixed_precision.h"
#include "lib/step/step_function.h"

namespace magic::dist {

struct ThreePoolSpdSetup {
  SpdConfig config;
  SpdData data;
  std::shared_ptr<const DataStream> stream;
  std::shared_ptr<const Optimizer> optimizer;
  // Clip the gradient by its global norm over every pool before the update: g' = c·g,
  // c = min(1, clip_norm / ||g||).
  std::optional<double> clip_norm;
  uint64_t source_seed = 0;
  std::shared_ptr<const ThreePoolConventions> conventions = std::make_shared<ThreePoolConventions>();
  // The precision policy (mixed_precision.h): parameters enter the compute dtype after their
  // pool's copy (so the pools' sums run in the master dtype); the loss terms, the portals'
  // payloads, the sources and the data weights stay in the master dtype.
  std::shared_ptr<const MixedPrecision> precision = std::make_shared<MixedPrecision>();
};

class ThreePoolSpd : public StepFunction, public QueryFunction {
 public:
  ThreePoolSpd(ThreePoolSpdSetup setup, ThreePoolLayout layout, ThreePoolGroups groups, int rank);

  // This rank's share of the full initial parameters and sources, plus sync and optimizer state.
  TrainState initial_state(const TensorTree& full_params, const TensorTree& full_sources) const;

  int64_t num_steps() const override { return setup_.stream->num_steps(); }
  StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const override;
  TensorTree gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const override;
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override;
  double cotangent_scale() const override { return setup_.precision->policy().loss_scale; }
  // One loss term's gradient (the check's per-term rows), with the step's reduction.
  TensorTree term_gradient(const TrainState& state, int64_t t, const at::Tensor& w, SpdTerm term) const;

  int64_t num_queries() const override { return setup_.data.queries.size(0); }
  // Q = mean over queries of Σ_s the site error with masks = gates (global value on every rank).
  at::Tensor loss(const TensorTree& params, std::optional<int64_t> index = std::nullopt) const override;

  // Waits for this rank's last portal sends (the final backward's), so that a send no peer
  // received is an error now and nothing of the run (its groups included) outlives it.
  void finish() const;

  PoolRole role() const { return layout_.role(rank_); }
  bool pool_leader() const;  // the rank whose copy represents its pool's replicated state

 private:
  // This rank's rows of step t's batch, their site inputs and weights.
  struct Shard {
    int64_t t = 0, batch = 0;
    double real_rows = 0;  // real examples in the global batch (the padding row excluded)
    RowRange range{0, 0};
    std::vector<int64_t> rows;
    std::vector<at::Tensor> site_inputs;
    at::Tensor weights;
  };
  Shard shard_of(int64_t t, const at::Tensor& w) const;
  // This rank's loss and the sum of the tokens of the portals it sent (zeros), by pool.
  std::pair<at::Tensor, at::Tensor> local_loss(const TrainState& s, int64_t t, const at::Tensor& w,
                                               const SpdTermWeights& terms) const;
  std::pair<at::Tensor, at::Tensor> ci_loss(const TrainState& s, const Shard& shard, const SpdTermWeights& terms) const;
  std::pair<at::Tensor, at::Tensor> block_loss(const TrainState& s, const Shard& shard, const at::Tensor& gates,
                                               const SpdTermWeights& terms) const;
  at::Tensor ppgd_loss(const TrainState& s, const Shard& shard, const at::Tensor& gates,
                       const SpdTermWeights& terms) const;
  TensorTree differentiate(const TrainState& s, int64_t t, const at::Tensor& w, const SpdTermWeights& terms,
                           bool create_graph, at::Tensor* sources_grad) const;

  at::Tensor in_compute(const at::Tensor& x) const { return x.to(setup_.precision->policy().compute); }
  at::Tensor in_master(const at::Tensor& x) const { return x.to(setup_.precision->policy().master); }
  // The pool's replicated parameters as the forward uses them.
  TensorTree entered_params(const TensorTree& params, const Group& pool) const;
  // c = min(1, clip_norm / ||g||) over every pool's gradient, differentiable (three_pool_spd.h).
  at::Tensor clip_coefficient_of(const TrainState& s, const TensorTree& grads) const;

  ThreePoolSpdSetup setup_;
  std::vector<at::Tensor> target_compute_;  // the target MLP's weights in the compute dtype
  ThreePoolLayout layout_;
  ThreePoolGroups groups_;
  int rank_;
};

}  // namespace magic::dist
