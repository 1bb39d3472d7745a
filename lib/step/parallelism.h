// How a training step's rows, sequence columns, model and parameters are split across ranks, and
// how its normalizer and gradient are reduced. The LM step and query are written once against
// this interface: the single-process engine uses SingleProcess (identity everywhere);
// lib/distributed/parallel/data_parallel.h is the dp x cp x tp x fsdp mesh. A method with a body
// here is one a Parallelism may lack: called on a class that does not implement it, it throws
// std::logic_error naming the class and the method instead of quietly being an identity.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/core/tensor_tree.h"
#include "lib/model/model_layout.h"
#include "lib/step/micro_batch_pass.h"
#include "lib/trace/trace_layout.h"

namespace magic {

// g·c for every tensor of `grads`.
TensorTree scale_by(const TensorTree& grads, const at::Tensor& coefficient);

// Per-parameter sums over the ranks of each parameter's gradient reduction
// (Parallelism::sum_over_reduction_groups).
struct ReductionGroupSums {
  TensorTree whole;                      // each sum, joined to the whole parameter's shape
  std::map<std::string, int64_t> ranks;  // each parameter's reduction group: its size
};

class Parallelism {
 public:
  virtual ~Parallelism() = default;

  // --- rows (data parallel)
  // This rank's share of `global` (batch rows, query indices), in order.
  virtual std::vector<int64_t> local_share(const std::vector<int64_t>& global) const = 0;
  // The `mean` reduction's denominator, given this rank's count of valid labels.
  virtual double mean_denominator(double local_valid_labels) const = 0;

  // --- columns and model (context, tensor and sequence parallel)
  // How this rank's forward pass computes a sequence of `length`: its columns, how attention
  // reaches the rest, and the model's tensor-parallel operations.
  virtual ModelLayout model_layout(int64_t /*length*/) const { unimplemented("model_layout"); }

  // --- parameters (the plan's pieces, sharded)
  // This rank's stored piece of full parameters (optimizer state follows it), and back to full
  // shape outside autograd (for comparisons and outputs).
  virtual TensorTree shard(const TensorTree& /*full*/) const { unimplemented("shard"); }
  virtual TensorTree unshard(const TensorTree& /*local*/) const { unimplemented("unshard"); }
  // The parameters as this rank's computation uses them (its tensor-parallel pieces), from its
  // stored piece. Differentiating a local loss with respect to the stored piece through enter()
  // yields the reduced gradient of that piece.
  virtual TensorTree enter(const TensorTree& params) const = 0;
  // ||g||² of the whole gradient, differentiable, from this rank's piece of it (for clipping);
  // every parameter counted once, whichever ranks hold copies of it. The value is the same on
  // every rank, and its derivative stays on this rank's piece (reduce_from_group): apply_clip
  // does the summing, so that two meshes' squares can be added (bridged_parallelism.h).
  virtual at::Tensor global_squares(const TensorTree& /*grads*/) const { unimplemented("global_squares"); }
  at::Tensor global_norm(const TensorTree& grads) const { return global_squares(grads).sqrt(); }
  // g·c for this rank's piece g of the gradient and the clip coefficient c (replicated), in the
  // way that makes c's own derivative sum over the ranks whose pieces differ (copy_to_group).
  virtual TensorTree apply_clip(const TensorTree& /*grads*/, const at::Tensor& /*coefficient*/) const {
    unimplemented("apply_clip");
  }

  // --- micro-batches (gradient accumulation; pipeline stages)
  // Σ_m ∇(S·L_m) with respect to the stored `params` over the pass's micro-batches, and Σ_m L_m.
  // The default (no body-throws rule here: every parallelism has micro-batches) runs them one after
  // another, each entering `params` and differentiated on its own, so that enter()'s backward
  // reduces each; a pipeline runs them over its stages in its schedule.
  virtual MicroBatchGradients micro_batch_gradients(const TensorTree& params, const MicroBatchPass& pass,
                                                    bool create_graph) const;
  // Each micro-batch's loss, forward only (differentiable by the default; a pipeline's are values):
  // this rank's share, empty on a rank that computes no loss.
  virtual std::vector<at::Tensor> micro_batch_losses(const TensorTree& params, const MicroBatchPass& pass) const;

  // --- reductions
  // Applied to every gradient of a local loss with respect to the stored parameters (the
  // training step's and the query's), after differentiation.
  virtual TensorTree reduce_gradient(const TensorTree& grads) const = 0;
  // The training step's reduction convention after the reduction (e.g. AVG's divide).
  virtual TensorTree apply_convention(const TensorTree& grads) const = 0;
  // What this rank hands its optimizer of the reduced, unscaled and clipped gradient: all of it
  // here (sharded parameters hold their shard already); a ZeRO-style optimizer would take its
  // slice at this point, which is why it is a seam of its own.
  virtual TensorTree optimizer_input(const TensorTree& /*clipped*/) const { unimplemented("optimizer_input"); }
  // Σ of `local` (shaped as enter() hands the parameters to the computation) over each
  // parameter's reduction group, the ranks whose local gradients enter()'s backward adds for it,
  // joined to whole shape as unshard() joins; outside autograd, every rank calls it. What the
  // gradient reduction is judged against (checks/reduction_probe.h).
  virtual ReductionGroupSums sum_over_reduction_groups(const TensorTree& /*local*/) const {
    unimplemented("sum_over_reduction_groups");
  }
  // Σ over the ranks that split the batch of a per-rank value, detached (for logged values and
  // the global residual; tensor-parallel ranks hold the same value and count once).
  virtual at::Tensor sum_across_ranks(const at::Tensor& local) const = 0;
  // dQ/dw from this rank's REPLAY (non-zero on its own rows and columns) -> the full scores.
  virtual at::Tensor assemble_weight_gradient(const at::Tensor& local) const = 0;
  // Whether any of the above talks to other ranks.
  virtual bool runs_collectives() const { unimplemented("runs_collectives"); }
  // How this rank's traced tensors make up the whole (lib/trace); empty in a single process.
  virtual TraceLayout trace_layout() const { unimplemented("trace_layout"); }

 protected:
  [[noreturn]] void unimplemented(const char* method) const;
};

class SingleProcess : public Parallelism {
 public:
  std::vector<int64_t> local_share(const std::vector<int64_t>& global) const override { return global; }
  double mean_denominator(double local_valid_labels) const override { return local_valid_labels; }
  ModelLayout model_layout(int64_t length) const override { return ModelLayout::whole(length); }
  TensorTree shard(const TensorTree& full) const override { return full; }
  TensorTree unshard(const TensorTree& local) const override { return local; }
  TensorTree enter(const TensorTree& params) const override { return params; }
  at::Tensor global_squares(const TensorTree& grads) const override { return dot(grads, grads); }
  TensorTree apply_clip(const TensorTree& grads, const at::Tensor& coefficient) const override {
    return scale_by(grads, coefficient);
  }
  TensorTree reduce_gradient(const TensorTree& grads) const override { return grads; }
  TensorTree apply_convention(const TensorTree& grads) const override { return grads; }
  TensorTree optimizer_input(const TensorTree& clipped) const override { return clipped; }
  ReductionGroupSums sum_over_reduction_groups(const TensorTree& local) const override;
  at::Tensor sum_across_ranks(const at::Tensor& local) const override { return local.detach(); }
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override { return local; }
  bool runs_collectives() const override { return false; }
  TraceLayout trace_layout() const override { return {}; }
};

// Global value forward, local partial backward, for a quantity summed across ranks:
//   local + (Σ_r local_r - local), the bracket detached.
at::Tensor with_global_value(const Parallelism& parallelism, const at::Tensor& local);

}  // namespace magic
