// A Parallelism that forwards every method to the one it wraps: the base of the taps that record
// what the distributed step does (reduction_probe.h, shard_weights.h), each overriding the one
// method it listens to.
#pragma once

#include <memory>

#include "lib/step/parallelism.h"

namespace magic::checks {

class ForwardingParallelism : public Parallelism {
 public:
  explicit ForwardingParallelism(std::shared_ptr<const Parallelism> inner) : inner_(std::move(inner)) {}

  std::vector<int64_t> local_share(const std::vector<int64_t>& global) const override {
    return inner_->local_share(global);
  }
  double mean_denominator(double local_valid_labels) const override {
    return inner_->mean_denominator(local_valid_labels);
  }
  ModelLayout model_layout(int64_t length) const override { return inner_->model_layout(length); }
  TensorTree shard(const TensorTree& full) const override { return inner_->shard(full); }
  TensorTree unshard(const TensorTree& local) const override { return inner_->unshard(local); }
  TensorTree enter(const TensorTree& params) const override { return inner_->enter(params); }
  at::Tensor global_squares(const TensorTree& grads) const override { return inner_->global_squares(grads); }
  TensorTree apply_clip(const TensorTree& grads, const at::Tensor& coefficient) const override {
    return inner_->apply_clip(grads, coefficient);
  }
  TensorTree reduce_gradient(const TensorTree& grads) const override { return inner_->reduce_gradient(grads); }
  TensorTree apply_convention(const TensorTree& grads) const override { return inner_->apply_convention(grads); }
  TensorTree optimizer_input(const TensorTree& clipped) const override { return inner_->optimizer_input(clipped); }
  // The pass enters parameters through its own compute (the outermost Parallelism's enter), so a
  // tap on enter() still hears a pipeline's.
  MicroBatchGradients micro_batch_gradients(const TensorTree& params, const MicroBatchPass& pass,
                                            bool create_graph) const override {
    return inner_->micro_batch_gradients(params, pass, create_graph);
  }
  std::vector<at::Tensor> micro_batch_losses(const TensorTree& params, const MicroBatchPass& pass) const override {
    return inner_->micro_batch_losses(params, pass);
  }
  ReductionGroupSums sum_over_reduction_groups(const TensorTree& local) const override {
    return inner_->sum_over_reduction_groups(local);
  }
  at::Tensor sum_across_ranks(const at::Tensor& local) const override { return inner_->sum_across_ranks(local); }
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override {
    return inner_->assemble_weight_gradient(local);
  }
  bool runs_collectives() const override { return inner_->runs_collectives(); }
  TraceLayout trace_layout() const override { return inner_->trace_layout(); }

 protected:
  const Parallelism& inner() const { return *inner_; }

 private:
  std::shared_ptr<const Parallelism> inner_;
};

}  // namespace magic::checks
