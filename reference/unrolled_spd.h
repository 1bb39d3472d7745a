// The unrolled reference for the decomposition workload (lib/model/spd.h): one process, the
// whole global batch, one autograd graph through every step, one autograd call for dQ/dw.
// Written plainly, with its own loop, batch gathering, normalizer and PPGD update.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/core/precision_policy.h"
#include "lib/core/tensor_tree.h"
#include "lib/data/data_stream.h"
#include "lib/model/spd.h"
#include "lib/optim/optimizer.h"

namespace magic::reference {

struct UnrolledSpdSetup {
  SpdConfig config;
  SpdData data;
  DataStream stream;
  std::shared_ptr<const Optimizer> optimizer;
  std::optional<double> clip_norm;  // g' = c·g, c = min(1, clip_norm / (||g|| + 1e-6))
  TensorTree initial_params;        // every ci.* and V/U
  TensorTree initial_sources;       // every a.<s>
  uint64_t source_seed = 0;         // of the stochastic masks u
  // Applied plainly: the model on parameters, data, masks and sources cast to the compute dtype,
  // every loss term widened to master, each backward of S·loss divided by S.
  PrecisionPolicy precision;
  // Called after each training step of the unrolled run (a caller's progress and stop check);
  // it sees the step index only, so it cannot change a value.
  std::function<void(int64_t step)> after_step;
};

struct UnrolledSpdResult {
  at::Tensor scores;  // dQ/dw [examples]
  TensorTree final_params, final_sources;
  std::vector<TensorTree> step_params, step_sources;  // θ_t and a_t, the state step t starts from
  // Per step: "total" and each term's name -> the gradient with respect to the parameters.
  std::vector<std::map<std::string, TensorTree>> step_grads;
  std::vector<TensorTree> step_opt;                // the optimizer state step t starts from
  std::vector<TensorTree> step_clipped;            // what the optimizer consumed: c_t·∇L_t (c_t = 1 unclipped)
  std::vector<at::Tensor> step_clip_coefficients;  // c_t; empty without clipping
  double query_loss = 0.0;
};

UnrolledSpdResult unrolled_spd_scores(const UnrolledSpdSetup& setup, const at::Tensor& w);

// ∇L_t at (params, sources) for step t's batch.
TensorTree spd_batch_gradient(const UnrolledSpdSetup& setup, const TensorTree& params, const TensorTree& sources,
                              const at::Tensor& w, int64_t t);

// κ·∂c/∂θ at (params, sources) for step t's batch: the clip coefficient's derivative
// (setup.clip_norm set).
TensorTree spd_clip_gradient(const UnrolledSpdSetup& setup, const TensorTree& params, const TensorTree& sources,
                             const at::Tensor& w, int64_t t, double kappa);

// ∂(v·∇L_t)/∂w at (params, sources) for step t's batch: REPLAY's product through the gradient,
// with respect to the data weights, for a cotangent v of the gradient.
at::Tensor spd_weight_product(const UnrolledSpdSetup& setup, const TensorTree& params, const TensorTree& sources,
                              const at::Tensor& w, int64_t t, const TensorTree& v);

// ∇²L_t v at (params, sources) for step t's batch.
TensorTree spd_batch_hvp(const UnrolledSpdSetup& setup, const TensorTree& params, const TensorTree& sources,
                         const at::Tensor& w, int64_t t, const TensorTree& direction);

// ∂Q/∂θ of the query loss: Q = mean over queries of Σ_s the site error with masks = gates.
TensorTree spd_query_gradient(const UnrolledSpdSetup& setup, const TensorTree& params);

}  // namespace magic::reference
