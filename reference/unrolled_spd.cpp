#include "reference/unrolled_spd.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/model/kernel_fallback.h"

namespace magic::reference {
namespace {

struct FullBatch {
  std::vector<int64_t> rows;
  at::Tensor x, w;  // padding rows: zero input, zero weight
  double real_rows = 0;
};

FullBatch gather(const UnrolledSpdSetup& setup, const at::Tensor& w, int64_t t) {
  FullBatch b;
  b.rows = setup.stream.rows(t);
  std::vector<at::Tensor> xs, ws;
  for (int64_t r : b.rows) {
    const bool real = r < setup.data.inputs.size(0);
    b.real_rows += real;
    xs.push_back(real ? setup.data.inputs[r] : at::zeros_like(setup.data.inputs[0]));
    ws.push_back(real ? w[r] : at::zeros({}, w.options()));
  }
  b.x = at::stack(xs);
  b.w = at::stack(ws);
  return b;
}

at::Tensor compute(const UnrolledSpdSetup& setup, const at::Tensor& x) {
  return x.to(setup.precision.compute);
}

at::Tensor master(const UnrolledSpdSetup& setup, const at::Tensor& x) {
  return x.to(setup.precision.master);
}

std::vector<at::Tensor> targets_in_compute(const UnrolledSpdSetup& setup) {
  std::vector<at::Tensor> out;
  for (const auto& w : setup.data.target) out.push_back(compute(setup, w));
  return out;
}

// The whole training loss of step t, with each term scaled by `terms`.
at::Tensor plain_loss(const UnrolledSpdSetup& setup, const TensorTree& params_in, const TensorTree& sources,
                      const FullBatch& b, int64_t t, const SpdTermWeights& terms) {
  const SpdConfig& c = setup.config;
  const TensorTree params = params_in.map([&](const at::Tensor& p) { return compute(setup, p); });
  const auto target_weights = targets_in_compute(setup);
  const auto xs = spd_site_inputs(target_weights, compute(setup, b.x));
  at::Tensor faith = at::zeros({}, b.x.options()), rec = at::zeros({b.x.size(0)}, b.x.options());
  at::Tensor ppgd = rec.clone(), importance = rec.clone();
  for (int64_t s = 0; s < c.n_sites; ++s) {
    const at::Tensor target = kernels::matmul(xs[s], target_weights[s]);
    const at::Tensor g = spd_gates(params, s, xs[s]);
    const at::Tensor u =
        compute(setup, spd_stochastic_sources(setup.source_seed, t, b.rows, s, c.components, b.x.scalar_type()));
    const at::Tensor a = compute(setup, sources.at("a." + std::to_string(s)));
    faith = faith + master(setup, spd_faithfulness(params, s, target_weights[s]));
    rec = rec + master(setup, spd_site_error(spd_masked_output(params, s, xs[s], g + (1 - g) * u), target));
    ppgd = ppgd + master(setup, spd_site_error(spd_masked_output(params, s, xs[s], g + (1 - g) * a), target));
    importance = importance + master(setup, g.sum(1));
  }
  const double R = b.real_rows;
  return terms.faithfulness * c.faithfulness_coeff * faith +
         terms.reconstruction * c.reconstruction_coeff * (b.w * rec).sum() / R +
         terms.ppgd * c.ppgd_coeff * (b.w * ppgd).sum() / R +
         terms.importance * c.importance_coeff *
             spd_importance_penalty((b.w * importance).sum() / R, c.importance_beta);
}

// ∂loss/∂params as the policy computes them: the backward of S·loss, divided by S.
TensorTree grads_of(const UnrolledSpdSetup& setup, const at::Tensor& loss, const TensorTree& params,
                    bool create_graph) {
  const double S = setup.precision.loss_scale;
  auto g = torch::autograd::grad({loss * S}, params.tensors(), {}, create_graph, create_graph, true);
  for (auto& x : g) {
    if (x.defined()) x = x / S;
  }
  return with_values(params, g);
}

// The sign-gradient ascent of the adversarial sources on the (unscaled) PPGD term.
TensorTree next_sources(const UnrolledSpdSetup& setup, const TensorTree& params, const TensorTree& sources,
                        const FullBatch& b, int64_t t) {
  TensorTree a = sources.requires_grad();
  at::Tensor ppgd_term = plain_loss(setup, params.detach(), a, b, t, SpdTermWeights::only(SpdTerm::kPpgd));
  TensorTree g = grads_of(setup, ppgd_term, a, false);
  return zip(sources, g, [&](const at::Tensor& x, const at::Tensor& gx) {
    return spd_sources_ascent(x, gx, setup.config.ppgd_step).detach();
  });
}

// c = min(1, max_norm / (||g|| + 1e-6)) over every parameter's gradient, written out here.
at::Tensor plain_clip_coefficient(const TensorTree& grads, double max_norm) {
  at::Tensor squares = at::zeros({}, grads.begin()->tensor.options());
  for (const auto& g : grads) squares = squares + (g.tensor * g.tensor).sum();
  return (max_norm / (squares.sqrt() + 1e-6)).clamp_max(1.0);
}

at::Tensor plain_query_loss(const UnrolledSpdSetup& setup, const TensorTree& params) {
  const at::Tensor& xq = setup.data.queries;
  const TensorTree pc = params.map([&](const at::Tensor& p) { return compute(setup, p); });
  const auto target_weights = targets_in_compute(setup);
  const auto xs = spd_site_inputs(target_weights, compute(setup, xq));
  at::Tensor err = at::zeros({xq.size(0)}, xq.options());
  for (int64_t s = 0; s < setup.config.n_sites; ++s) {
    err = err + master(setup, spd_site_error(spd_masked_output(pc, s, xs[s], spd_gates(pc, s, xs[s])),
                                             kernels::matmul(xs[s], target_weights[s])));
  }
  return err.mean();
}

}  // namespace

UnrolledSpdResult unrolled_spd_scores(const UnrolledSpdSetup& setup, const at::Tensor& w_in) {
  at::Tensor w = w_in.detach().clone().requires_grad_(true);
  TensorTree params = setup.initial_params.requires_grad();
  TensorTree sources = setup.initial_sources.clone();
  TensorTree opt_state = setup.optimizer->init(params);
  UnrolledSpdResult result;
  for (int64_t t = 0; t < setup.stream.num_steps(); ++t) {
    const FullBatch b = gather(setup, w, t);
    result.step_params.push_back(params.detach());
    result.step_sources.push_back(sources.clone());
    std::map<std::string, TensorTree> grads_t;
    for (SpdTerm term : spd_terms()) {
      TensorTree leaves = params.requires_grad();
      grads_t[spd_term_name(term)] = grads_of(
          setup, plain_loss(setup, leaves, sources, gather(setup, w.detach(), t), t, SpdTermWeights::only(term)),
          leaves, false);
    }
    TensorTree grads = grads_of(setup, plain_loss(setup, params, sources, b, t, {}), params, true);
    grads_t["total"] = grads.detach();
    result.step_grads.push_back(grads_t);
    const TensorTree new_sources = next_sources(setup, params, sources, b, t);
    if (setup.clip_norm) {
      const at::Tensor c = plain_clip_coefficient(grads, *setup.clip_norm);
      result.step_clip_coefficients.push_back(c.detach());
      grads = grads.map([&](const at::Tensor& g) { return g * c; });
    }
    result.step_clipped.push_back(grads.detach());
    result.step_opt.push_back(opt_state.detach());
    OptimizerUpdate update = setup.optimizer->update(params, grads, opt_state);
    params = update.params;
    opt_state = update.state;
    sources = new_sources;
    if (setup.after_step) setup.after_step(t);
  }
  result.final_params = params.detach();
  result.final_sources = sources;
  at::Tensor q = plain_query_loss(setup, params);
  result.query_loss = q.item<double>();
  result.scores = torch::autograd::grad({q * setup.precision.loss_scale}, {w})[0] / setup.precision.loss_scale;
  return result;
}

TensorTree spd_batch_gradient(const UnrolledSpdSetup& setup, const TensorTree& params_in, const TensorTree& sources,
                              const at::Tensor& w, int64_t t) {
  TensorTree params = params_in.requires_grad();
  return grads_of(setup, plain_loss(setup, params, sources, gather(setup, w.detach(), t), t, {}), params, false)
      .detach();
}

TensorTree spd_clip_gradient(const UnrolledSpdSetup& setup, const TensorTree& params_in, const TensorTree& sources,
                             const at::Tensor& w, int64_t t, double kappa) {
  TensorTree params = params_in.requires_grad();
  TensorTree g = grads_of(setup, plain_loss(setup, params, sources, gather(setup, w.detach(), t), t, {}), params, true);
  const at::Tensor c = plain_clip_coefficient(g, *setup.clip_norm);
  return with_values(params, torch::autograd::grad({kappa * c}, params.tensors(), {}, false, false, true)).detach();
}

at::Tensor spd_weight_product(const UnrolledSpdSetup& setup, const TensorTree& params_in, const TensorTree& sources,
                              const at::Tensor& w_in, int64_t t, const TensorTree& v) {
  TensorTree params = params_in.requires_grad();
  at::Tensor w = w_in.detach().clone().requires_grad_(true);
  TensorTree g = grads_of(setup, plain_loss(setup, params, sources, gather(setup, w, t), t, {}), params, true);
  return torch::autograd::grad({dot(g, v)}, {w})[0].detach();
}

TensorTree spd_batch_hvp(const UnrolledSpdSetup& setup, const TensorTree& params_in, const TensorTree& sources,
                         const at::Tensor& w, int64_t t, const TensorTree& direction) {
  TensorTree params = params_in.requires_grad();
  TensorTree g = grads_of(setup, plain_loss(setup, params, sources, gather(setup, w.detach(), t), t, {}), params, true);
  return with_values(params, torch::autograd::grad({dot(g, direction)}, params.tensors(), {}, false, false, true))
      .detach();
}

TensorTree spd_query_gradient(const UnrolledSpdSetup& setup, const TensorTree& params_in) {
  TensorTree params = params_in.requires_grad();
  return grads_of(setup, plain_query_loss(setup, params), params, false).detach();
}

}  // namespace magic::reference
