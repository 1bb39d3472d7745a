// A small stochastic parameter decomposition (SPD) workload. A frozen target MLP
//   x_0 = x,  x_{s+1} = relu(x_s W_s)       (sites s = 0..S-1, each W_s [d, d])
// has each site decomposed into C rank-one components V_s [d, C], U_s [C, d]; a causal-importance
// (CI) MLP per site gives gates g = sigmoid(gelu(x_s A_s + b_s) B_s + c_s) in (0, 1)^C.
// Per example b (weight w_b) and real batch rows R:
//   faithfulness   F   = Σ_s mean((W_s - V_s U_s)²)                              (data-independent)
//   reconstruction rec_b = Σ_s mean_j((((x_s V_s) ⊙ m_s) U_s - x_s W_s)²), m_s = g + (1-g) u
//                  with u ~ U(0,1) pinned to (seed, step, example, site, component)
//   ppgd           ppgd_b: rec_b with m_s = g + (1-g) a_s, a_s the persistent adversarial sources
//   importance     S = (1/R) Σ_b w_b Σ_{s,c} g_{b,s,c},   I = S + β S log2(1 + S)
//   L = c_f F + (1/R) Σ_b w_b (c_r rec_b + c_p ppgd_b) + c_i I
// and each step the sources climb the PPGD loss by sign-gradient ascent:
//   a' = clamp(a + η sign(∂/∂a (1/R) Σ_b w_b ppgd_b), 0, 1).
// Functions here are the pieces of that mathematics; stepping and normalizing are the callers'.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lib/core/tensor_tree.h"

namespace magic {

struct SpdConfig {
  int64_t width = 8;
  int64_t n_sites = 2;
  int64_t components = 6;
  int64_t ci_hidden = 4;
  int64_t examples = 64;
  double feature_probability = 0.3;
  double faithfulness_coeff = 1.0, reconstruction_coeff = 1.0, importance_coeff = 0.05, ppgd_coeff = 0.5;
  double importance_beta = 0.5;
  double ppgd_step = 0.05;
};

enum class SpdTerm { kFaithfulness, kReconstruction, kImportance, kPpgd };
const std::vector<SpdTerm>& spd_terms();
std::string spd_term_name(SpdTerm term);

// Multipliers on the four terms (1 everywhere for training; one-hot for a per-term gradient).
struct SpdTermWeights {
  double faithfulness = 1.0, reconstruction = 1.0, importance = 1.0, ppgd = 1.0;
  static SpdTermWeights only(SpdTerm term);
};

// The frozen target weights W_s and the sparse-feature inputs (each coordinate active with
// probability p, value U(0, 1)), all from one seed.
std::vector<at::Tensor> spd_target_weights(const SpdConfig& config, c10::ScalarType dtype, uint64_t seed);
at::Tensor spd_inputs(const SpdConfig& config, int64_t count, c10::ScalarType dtype, uint64_t seed,
                      const std::string& purpose);
// Everything a run draws from its seed: target, training inputs [examples, d], query inputs.
struct SpdData {
  std::vector<at::Tensor> target;
  at::Tensor inputs;
  at::Tensor queries;
};
SpdData spd_data(const SpdConfig& config, int64_t n_queries, c10::ScalarType dtype, uint64_t seed);
// Every site's CI and component parameters, and every site's sources, as one tree each.
TensorTree spd_init_params(const SpdConfig& config, c10::ScalarType dtype, uint64_t seed);
TensorTree spd_init_all_sources(const SpdConfig& config, c10::ScalarType dtype);

// x_0 .. x_{S-1} of the frozen target for inputs x [B, d].
std::vector<at::Tensor> spd_site_inputs(const std::vector<at::Tensor>& target, const at::Tensor& x);

// Parameters of one site: "ci.<s>.A" [d, H], "ci.<s>.b" [H], "ci.<s>.B" [H, C], "ci.<s>.c" [C];
// "V.<s>" [d, C], "U.<s>" [C, d]; persistent "a.<s>" [C] (starts at 0.5).
TensorTree spd_init_ci(const SpdConfig& config, int64_t site, c10::ScalarType dtype, uint64_t seed);
TensorTree spd_init_components(const SpdConfig& config, int64_t site, c10::ScalarType dtype, uint64_t seed);
TensorTree spd_init_sources(const SpdConfig& config, int64_t site, c10::ScalarType dtype);

at::Tensor spd_gates(const TensorTree& params, int64_t site, const at::Tensor& x_site);
// ((x V) ⊙ mask) U for one site.
at::Tensor spd_masked_output(const TensorTree& params, int64_t site, const at::Tensor& x_site, const at::Tensor& mask);
// Per-row mean squared error between a site's masked output and its target x_s W_s. [B]
at::Tensor spd_site_error(const at::Tensor& output, const at::Tensor& target);
at::Tensor spd_faithfulness(const TensorTree& params, int64_t site, const at::Tensor& weight);
at::Tensor spd_importance_penalty(const at::Tensor& total, double beta);
// One sign-gradient ascent step of a site's sources: a' = clamp(a + η tie_sign(g), 0, 1), where
// tie_sign(g) is sign(g) except that |g| <= 1e-9 max|g| (over the site) is a tie and gives 0.
// Why: g is a sum over the batch, which a pool adds in shards and one process adds at once; the
// two differ by ~1e-16 of the terms' size, so a component whose true value is near 0 would take
// its sign from the summation order. Inside the dead zone both sides make the same no-move.
at::Tensor spd_sources_ascent(const at::Tensor& sources, const at::Tensor& grad, double step);

// u [rows, C] in [0, 1), a pure function of (seed, step, example row, site, component): the same
// on every rank and in the reference, whatever the layout.
at::Tensor spd_stochastic_sources(uint64_t seed, int64_t step, const std::vector<int64_t>& rows, int64_t site,
                                  int64_t components, c10::ScalarType dtype);

}  // namespace magic
