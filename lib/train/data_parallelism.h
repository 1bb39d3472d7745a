// How a training step's batch, normalizer and gradient are split across data-parallel ranks.
// The LM step and query are written once against this interface: the single-process engine
// uses SingleProcess (identity everywhere); lib/dist provides the distributed conventions.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "lib/core/tensor_tree.h"

namespace magic {

class DataParallelism {
 public:
  virtual ~DataParallelism() = default;

  // This rank's share of `global` (batch rows, query indices), in order.
  virtual std::vector<int64_t> local_share(const std::vector<int64_t>& global) const = 0;

  // The `mean` reduction's denominator, given this rank's count of valid labels.
  virtual double mean_denominator(double local_valid_labels) const = 0;

  // Replicated parameters as this rank's local computation uses them. Differentiating a local
  // loss with respect to the replicated parameters through enter() yields the reduced gradient.
  virtual TensorTree enter(const TensorTree& params) const = 0;

  // Applied to every gradient of a local loss with respect to the replicated parameters (the
  // training step's and the query's), after differentiation.
  virtual TensorTree reduce_gradient(const TensorTree& grads) const = 0;

  // The training step's reduction convention after the reduction (e.g. AVG's divide).
  virtual TensorTree apply_convention(const TensorTree& grads) const = 0;

  // Σ over ranks of a per-rank value, detached (for logged values and the global residual).
  virtual at::Tensor sum_across_ranks(const at::Tensor& local) const = 0;

  // dQ/dw from this rank's REPLAY (non-zero on its own rows) -> the full scores.
  virtual at::Tensor assemble_weight_gradient(const at::Tensor& local) const = 0;
};

class SingleProcess : public DataParallelism {
 public:
  std::vector<int64_t> local_share(const std::vector<int64_t>& global) const override { return global; }
  double mean_denominator(double local_valid_labels) const override { return local_valid_labels; }
  TensorTree enter(const TensorTree& params) const override { return params; }
  TensorTree reduce_gradient(const TensorTree& grads) const override { return grads; }
  TensorTree apply_convention(const TensorTree& grads) const override { return grads; }
  at::Tensor sum_across_ranks(const at::Tensor& local) const override { return local.detach(); }
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override { return local; }
};

// Global value forward, local partial backward, for a quantity summed across ranks:
//   local + (Σ_r local_r - local), the bracket detached.
at::Tensor with_global_value(const DataParallelism& parallelism, const at::Tensor& local);

}  // namespace magic
