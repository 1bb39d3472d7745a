// The Parallelism of a colocated encoder and language model (docs/magic-check.md, "Encoder and
// language model: the bridge"): two meshes over one world, each parameter on its own model's.
// The language model's mesh decides everything about rows, columns and the loss (its rows are the
// ones the loss sums over; the encoder's reach it through the bridge, bridged_prefix.h); each
// parameter tree is cut by name (patch_encoder.h: "encoder.*") and each part sharded, entered,
// reduced and clipped by its own side:
//   encoder parameters   the encoder's mesh: reduced over its dp (and fsdp) ranks
//   the rest             the language model's mesh: reduced over its dp x cp (and fsdp) ranks
// Both sides are DataParallel meshes (or planted variants of one). The clip's global norm adds
// the sides' squares, ||g||² = ||g_enc||² + ||g_lm||², and c enters each side's pieces by that
// side's apply_clip, so that c's derivative sums each side over its own groups.
#pragma once

#include <memory>

#include "lib/distributed/parallel/data_parallel.h"

namespace magic::dist {

class BridgedParallelism : public Parallelism {
 public:
  BridgedParallelism(std::shared_ptr<const Parallelism> encoder, std::shared_ptr<const Parallelism> lm);

  std::vector<int64_t> local_share(const std::vector<int64_t>& global) const override {
    return lm_->local_share(global);
  }
  double mean_denominator(double local_valid_labels) const override {
    return lm_->mean_denominator(local_valid_labels);
  }
  ModelLayout model_layout(int64_t length) const override { return lm_->model_layout(length); }
  TensorTree shard(const TensorTree& full) const override;
  TensorTree unshard(const TensorTree& local) const override;
  TensorTree enter(const TensorTree& params) const override;
  at::Tensor global_squares(const TensorTree& grads) const override;
  TensorTree apply_clip(const TensorTree& grads, const at::Tensor& coefficient) const override;
  TensorTree reduce_gradient(const TensorTree& grads) const override;
  TensorTree apply_convention(const TensorTree& grads) const override;
  TensorTree optimizer_input(const TensorTree& clipped) const override;
  ReductionGroupSums sum_over_reduction_groups(const TensorTree& local) const override;
  at::Tensor sum_across_ranks(const at::Tensor& local) const override { return lm_->sum_across_ranks(local); }
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override {
    return lm_->assemble_weight_gradient(local);
  }
  bool runs_collectives() const override { return true; }
  // The language model's mesh, with the encoder's as the grid "encoder" that its parameters are
  // placed on (docs/dump-format.md, "Named meshes").
  TraceLayout trace_layout() const override;

  const Parallelism& encoder() const { return *encoder_; }
  const Parallelism& lm() const { return *lm_; }

 private:
  // f applied to the encoder's part of `tree` on its side and to the rest on the other, joined
  // in `tree`'s order.
  TensorTree each_side(const TensorTree& tree,
                       const std::function<TensorTree(const Parallelism&, const TensorTree&)>& f) const;

  std::shared_ptr<const Parallelism> encoder_, lm_;
};

}  // namespace magic::dist
