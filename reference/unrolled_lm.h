// The unrolled reference for the causal-LM pipeline: one autograd graph through every training
// step and one autograd call for dQ/dw. Deliberately plain and independent of lib/train: its own
// loop, its own batch gathering and its own normalizer, so a bug in the engine's stepping or
// normalization cannot cancel out in a comparison.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <vector>

#include "lib/core/precision_policy.h"
#include "lib/core/tensor_tree.h"
#include "lib/data/data_stream.h"
#include "lib/data/token_dataset.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"
#include "lib/optim/optimizer.h"

namespace magic::reference {

struct UnrolledLmSetup {
  GptConfig model;
  std::shared_ptr<const TokenDataset> train;
  const TokenDataset* queries = nullptr;
  DataStream stream;
  Reduction reduction = Reduction::kMean;
  std::shared_ptr<const Optimizer> optimizer;
  std::optional<double> clip_norm;
  TensorTree initial_params;  // in the policy's master dtype, as `w`
  // Applied as plainly as possible: the forward on parameters cast to the compute dtype, the loss
  // in master, every backward of S·loss divided by S, parameters and optimizer state in master.
  PrecisionPolicy precision;
};

struct UnrolledLmResult {
  at::Tensor scores;  // dQ/dw, or [Q, ...] with per_query
  TensorTree final_params;
  std::vector<TensorTree> step_params;  // θ_t, the parameters step t starts from
  std::vector<TensorTree> step_opt;     // o_t, the optimizer state step t starts from
  std::vector<TensorTree> step_grads;   // ∇L_t(θ_t), before clipping
  // What the optimizer consumed at step t: c_t·∇L_t (c_t = 1 without clipping), and c_t.
  std::vector<TensorTree> step_clipped;
  std::vector<at::Tensor> step_clip_coefficients;
  double query_loss = 0.0;
};

// `w` is the weight tensor to differentiate at ([N] or [N, T]).
UnrolledLmResult unrolled_lm_scores(const UnrolledLmSetup& setup, const at::Tensor& w, bool per_query = false);

// ∇²L_t(θ) v: the Hessian of step t's full-batch loss at `params`, times `direction`.
TensorTree lm_batch_hvp(const UnrolledLmSetup& setup, const TensorTree& params, const at::Tensor& w, int64_t t,
                        const TensorTree& direction);

// ∂Q/∂θ of the mean query loss at `params`.
TensorTree lm_query_gradient(const UnrolledLmSetup& setup, const TensorTree& params);

}  // namespace magic::reference
