// The unrolled reference for the causal-LM pipeline: one autograd graph through every training
// step and one autograd call for dQ/dw. Deliberately plain and independent of lib/train: its own
// loop, its own batch gathering and its own normalizer, so a bug in the engine's stepping or
// normalization cannot cancel out in a comparison.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "lib/core/precision_policy.h"
#include "lib/core/tensor_tree.h"
#include "lib/data/data_stream.h"
#include "lib/data/token_dataset.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"
#include "lib/model/patch_encoder.h"
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
  // Called after each training step of the unrolled run (a caller's progress and stop check);
  // it sees the step index only, so it cannot change a value.
  std::function<void(int64_t step)> after_step;
  // ε of the training loss (lm_loss.h); the query loss Q is unsmoothed.
  double label_smoothing = 0.0;
  // Recording only (lib/trace): trace_micro_batches[t][k] are the positions, among step t's rows,
  // of micro-batch k's rows as a run that accumulates gradients records them; each forward record
  // of step t (its rows; the loss as their terms) is then made once per micro-batch. Empty: whole.
  // The step itself always runs the whole batch at once.
  std::vector<std::vector<std::vector<int64_t>>> trace_micro_batches;
  // A multimodal run's encoder: its outputs over each row's patch features (the datasets'
  // `patches`) are the embeddings of the row's first P columns, in the same graph.
  std::optional<PatchEncoderConfig> encoder;
};

struct UnrolledLmResult {
  at::Tensor scores;  // dQ/dw, or [Q, ...] with per_query
  TensorTree final_params;
  std::vector<TensorTree> step_params;  // θ_t, the parameters step t starts from
  std::vector<TensorTree> step_opt;     // o_t, the optimizer state step t starts from
  std::vector<TensorTree> step_grads;   // ∇L_t(θ_t), before clipping
  std::vector<double> step_losses;      // L_t(θ_t)
  // What the optimizer consumed at step t: c_t·∇L_t (c_t = 1 without clipping), and c_t.
  std::vector<TensorTree> step_clipped;
  std::vector<at::Tensor> step_clip_coefficients;
  double query_loss = 0.0;
  // The cotangent step t's product is taken against, λ_{t+1} = dQ/d(θ_{t+1}, o_{t+1}) (the
  // optimizer's floating entries; dQ/do_N = 0); empty with per_query.
  std::vector<TensorTree> step_param_cotangents, step_opt_cotangents;
};

// One step's vector-Jacobian product, as REPLAY takes it: (λθ_t, λo_t, δw_t) =
// (λθ, λo)·∂(θ_{t+1}, o_{t+1})/∂(θ_t, o_t, w), and its part through the batch's gradient: with
// μ = (λθ, λo)·∂(θ_{t+1}, o_{t+1})/∂g' the cotangent of the clipped gradient g' = c·g, μ·∂g'/∂(θ, w).
struct LmStepVjp {
  TensorTree params, opt;         // λθ_t, λo_t (floating optimizer entries)
  TensorTree gradient_cotangent;  // μ
  TensorTree through_gradient;    // μ·∂g'/∂θ
  at::Tensor dw;                  // δw_t = μ·∂g'/∂w (w enters the step through g' alone), shaped as w
  TensorTree clip_gradient;       // (μ·g)·∂c_t/∂θ, the clip's own term; empty without clipping
};

// `w` is the weight tensor to differentiate at ([N] or [N, T]).
UnrolledLmResult unrolled_lm_scores(const UnrolledLmSetup& setup, const at::Tensor& w, bool per_query = false);

// The product of step t at (θ_t, o_t) against (λθ, λo), through the step's own graph (not the
// unrolled run's): what REPLAY's step t must yield at the same state and cotangent.
LmStepVjp lm_step_vjp(const UnrolledLmSetup& setup, const TensorTree& params, const TensorTree& opt,
                      const at::Tensor& w, int64_t t, const TensorTree& param_cotangent,
                      const TensorTree& opt_cotangent);

// ∇²L_t(θ) v: the Hessian of step t's full-batch loss at `params`, times `direction`.
TensorTree lm_batch_hvp(const UnrolledLmSetup& setup, const TensorTree& params, const at::Tensor& w, int64_t t,
                        const TensorTree& direction);

// ∂Q/∂θ of the mean query loss at `params`.
TensorTree lm_query_gradient(const UnrolledLmSetup& setup, const TensorTree& params);

}  // namespace magic::reference
