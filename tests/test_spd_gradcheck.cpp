// First and second derivatives of each decomposition (SPD) loss term of lib/model/spd.h, by
// finite differences (checks::gradcheck, slow mode, fp64) with respect to the component (V, U),
// causal-importance and source parameters and the data weights w, composed as the reference and
// the three-pool engine compose them. REPLAY differentiates these terms twice, so both orders
// are checked. Planted wrong backwards (a gradient counted twice, a detached gate, a penalty whose
// backward is not differentiable) must fail.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/custom_function.h>

#include "checks/gradcheck.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/model/spd.h"

namespace magic {
namespace {

using checks::GradcheckResult;
using checks::TensorFunction;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A tiny SPD problem at a generic point: every parameter and source random, dense inputs.
struct SpdProblem {
  SpdConfig config;
  std::vector<at::Tensor> target, xs;  // W_s; site inputs x_s [B, d]
  std::vector<at::Tensor> u;           // pinned stochastic sources per site [B, C]
  TensorTree values;                   // params, sources "a.<s>" and data weights "w" [B]
  double real_rows = 0;

  SpdProblem() {
    config.width = 4;
    config.n_sites = 2;
    config.components = 3;
    config.ci_hidden = 3;
    config.feature_probability = 1.0;
    const int64_t B = 3;
    const auto dtype = at::kDouble;
    target = spd_target_weights(config, dtype, 11);
    xs = spd_site_inputs(target, spd_inputs(config, B, dtype, 11, "gradcheck-inputs"));
    at::Generator gen = make_generator(derive_seed(11, "spd-gradcheck"));
    auto jitter = [&](const at::Tensor& t) { return t + 0.3 * at::randn(t.sizes(), gen, t.options()); };
    values = spd_init_params(config, dtype, 11).map(jitter);
    for (int64_t s = 0; s < config.n_sites; ++s) {
      values.insert(str_cat("a.", s), at::rand({config.components}, gen, at::TensorOptions().dtype(dtype)));
      u.push_back(spd_stochastic_sources(11, 0, {0, 1, 2}, s, config.components, dtype));
    }
    values.insert("w", 0.5 + at::rand({B}, gen, at::TensorOptions().dtype(dtype)));
    real_rows = static_cast<double>(B);
  }

  // Leaves for `names`, in that order.
  std::vector<at::Tensor> inputs(const std::vector<std::string>& names) const {
    std::vector<at::Tensor> out;
    for (const auto& n : names) out.push_back(values.at(n).detach().clone().requires_grad_(true));
    return out;
  }

  // `term` of the tree with `names` replaced by the function's arguments.
  TensorFunction function(const std::vector<std::string>& names,
                          std::function<std::vector<at::Tensor>(const TensorTree&)> term) const {
    return [this, names, term](const std::vector<at::Tensor>& x) {
      TensorTree t = values;
      for (size_t i = 0; i < names.size(); ++i) t.set(names[i], x[i]);
      return term(t);
    };
  }

  // F = Σ_s mean((W_s - V_s U_s)²)
  at::Tensor faithfulness(const TensorTree& t) const {
    at::Tensor f = at::zeros({}, t.at("w").options());
    for (int64_t s = 0; s < config.n_sites; ++s) f = f + spd_faithfulness(t, s, target[s]);
    return f;
  }

  // Per-row Σ_s site error with m_s = g + (1 - g) ⊙ source(s), [B]. `detach_complement` plants a
  // gate cut out of the graph in (1 - g).
  at::Tensor masked_errors(const TensorTree& t, const std::function<at::Tensor(int64_t)>& source,
                           bool detach_complement = false) const {
    at::Tensor err = at::zeros({xs[0].size(0)}, xs[0].options());
    for (int64_t s = 0; s < config.n_sites; ++s) {
      const at::Tensor g = spd_gates(t, s, xs[s]);
      const at::Tensor m = g + (1 - (detach_complement ? g.detach() : g)) * source(s);
      err = err + spd_site_error(spd_masked_output(t, s, xs[s], m), at::matmul(xs[s], target[s]));
    }
    return err;
  }

  // (1/R) Σ_b w_b rec_b, and the rows' w_b rec_b / R
  std::vector<at::Tensor> weighted(const TensorTree& t, const at::Tensor& per_row) const {
    at::Tensor rows = t.at("w") * per_row / real_rows;
    return {rows.sum(), rows};
  }

  // S = (1/R) Σ_b w_b Σ_{s,c} g_{b,s,c}
  at::Tensor importance_total(const TensorTree& t) const {
    at::Tensor per_row = at::zeros({xs[0].size(0)}, xs[0].options());
    for (int64_t s = 0; s < config.n_sites; ++s) per_row = per_row + spd_gates(t, s, xs[s]).sum(1);
    return (t.at("w") * per_row).sum() / real_rows;
  }
};

std::vector<std::string> component_names() {
  return {"V.0", "U.0", "V.1", "U.1"};
}
std::vector<std::string> ci_names() {
  return {"ci.0.A", "ci.0.b", "ci.0.B", "ci.0.c", "ci.1.A", "ci.1.b", "ci.1.B", "ci.1.c"};
}
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// gradcheck and gradgradcheck in slow mode, both expected to pass.
void expect_both_orders_pass(const SpdProblem& p, const std::vector<std::string>& names,
                             std::function<std::vector<at::Tensor>(const TensorTree&)> term) {
  const TensorFunction fn = p.function(names, std::move(term));
  const auto inputs = p.inputs(names);
  GradcheckResult first = checks::gradcheck(fn, inputs);
  EXPECT_TRUE(first.passed) << first.message;
  EXPECT_GT(first.compared, 0);
  GradcheckResult second = checks::gradgradcheck(fn, inputs);
  EXPECT_TRUE(second.passed) << second.message;
  std::printf("  %zu inputs: gradcheck max |error| %.2g over %lld entries, gradgradcheck %.2g over %lld\n",
              names.size(), first.max_abs_error, static_cast<long long>(first.compared), second.max_abs_error,
              static_cast<long long>(second.compared));
}

TEST(SpdGradcheck, Faithfulness) {
  SpdProblem p;
  expect_both_orders_pass(p, component_names(),
                          [&](const TensorTree& t) { return std::vector<at::Tensor>{p.faithfulness(t)}; });
}

TEST(SpdGradcheck, ReconstructionWithPinnedSources) {
  SpdProblem p;
  expect_both_orders_pass(p, concat(concat(component_names(), ci_names()), {"w"}), [&](const TensorTree& t) {
    return p.weighted(t, p.masked_errors(t, [&](int64_t s) { return p.u[s]; }));
  });
}

TEST(SpdGradcheck, PpgdWithRespectToParamsSourcesAndWeights) {
  SpdProblem p;
  expect_both_orders_pass(p, concat(concat(component_names(), ci_names()), {"a.0", "a.1", "w"}),
                          [&](const TensorTree& t) {
                            return p.weighted(t, p.masked_errors(t, [&](int64_t s) { return t.at(str_cat("a.", s)); }));
                          });
}

TEST(SpdGradcheck, ImportanceMinimality) {
  SpdProblem p;
  expect_both_orders_pass(p, concat(ci_names(), {"w"}), [&](const TensorTree& t) {
    return std::vector<at::Tensor>{spd_importance_penalty(p.importance_total(t), p.config.importance_beta)};
  });
  // I(S) = S + β S log2(1 + S) alone, over a range of S.
  const TensorFunction penalty = [&](const std::vector<at::Tensor>& x) {
    return std::vector<at::Tensor>{spd_importance_penalty(x[0], p.config.importance_beta)};
  };
  const std::vector<at::Tensor> totals{at::tensor({0.3, 2.0, 7.5}, at::kDouble).requires_grad_(true)};
  GradcheckResult first = checks::gradcheck(penalty, totals), second = checks::gradgradcheck(penalty, totals);
  EXPECT_TRUE(first.passed) << first.message;
  EXPECT_TRUE(second.passed) << second.message;
}

// Identity whose backward doubles the cotangent: a replicated value whose gradient is reduced
// over a pool of two with a plain all_reduce_sum (counted world times).
struct CountedTwice : public torch::autograd::Function<CountedTwice> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x) { return x.clone(); }
  static variable_list backward(AutogradContext*, variable_list grad) { return {grad[0] * 2.0}; }
};

// I(S) whose backward I'(S) = 1 + β (log2(1+S) + S / ((1+S) ln 2)) is right but computed from a
// detached S: exact at first order, second order lost (the detached-residual mutation).
struct DetachedPenalty : public torch::autograd::Function<DetachedPenalty> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& total, double beta) {
    ctx->save_for_backward({total});
    ctx->saved_data["beta"] = beta;
    return spd_importance_penalty(total, beta);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const at::Tensor s = ctx->get_saved_variables()[0].detach();
    const double beta = ctx->saved_data["beta"].toDouble();
    return {grad[0] * (1 + beta * (at::log2(1 + s) + s / ((1 + s) * std::log(2.0)))), at::Tensor()};
  }
};

TEST(SpdGradcheck, PlantedGradientCountedTwiceFails) {
  SpdProblem p;
  const auto names = component_names();
  const TensorFunction planted = p.function(names, [&](const TensorTree& t) {
    TensorTree doubled = t;
    doubled.set("V.1", CountedTwice::apply(t.at("V.1")));
    return std::vector<at::Tensor>{p.faithfulness(doubled)};
  });
  GradcheckResult result = checks::gradcheck(planted, p.inputs(names));
  std::printf("  %s\n", result.message.c_str());
  EXPECT_FALSE(result.passed);
  EXPECT_NE(result.message.find("output 0 with respect to input 2"), std::string::npos) << result.message;
}

TEST(SpdGradcheck, PlantedDetachedGateFails) {
  SpdProblem p;
  auto term = [&](const TensorTree& t) {
    return p.weighted(t, p.masked_errors(
                             t, [&](int64_t s) { return p.u[s]; }, /*detach_complement=*/true));
  };
  // The V/U gradients do not go through the gate: still right. The CI gradients are wrong.
  EXPECT_TRUE(checks::gradcheck(p.function(component_names(), term), p.inputs(component_names())).passed);
  GradcheckResult result = checks::gradcheck(p.function(ci_names(), term), p.inputs(ci_names()));
  std::printf("  %s\n", result.message.c_str());
  EXPECT_FALSE(result.passed);
  EXPECT_NE(result.message.find("Jacobian mismatch"), std::string::npos) << result.message;
}

TEST(SpdGradcheck, PlantedNonDifferentiablePenaltyBackwardFailsGradgradcheckOnly) {
  SpdProblem p;
  // w first: S is linear in w, so the lost I''(S) ∂S/∂w ∂S/∂wᵀ block is the large one.
  const auto names = concat({"w"}, ci_names());
  const TensorFunction planted = p.function(names, [&](const TensorTree& t) {
    return std::vector<at::Tensor>{DetachedPenalty::apply(p.importance_total(t), p.config.importance_beta)};
  });
  const auto inputs = p.inputs(names);
  GradcheckResult first = checks::gradcheck(planted, inputs);
  EXPECT_TRUE(first.passed) << "first derivatives are right: " << first.message;
  GradcheckResult second = checks::gradgradcheck(planted, inputs);
  std::printf("  %s\n", second.message.c_str());
  EXPECT_FALSE(second.passed);
  EXPECT_NE(second.message.find("second derivative"), std::string::npos) << second.message;
}

}  // namespace
}  // namespace magic
