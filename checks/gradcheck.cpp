#include "checks/gradcheck.h"

#include <torch/csrc/autograd/autograd.h>

#include <cmath>

#include "lib/core/seed.h"
#include "lib/core/strings.h"

namespace magic::checks {
namespace {

std::vector<size_t> differentiable_indices(const std::vector<at::Tensor>& inputs) {
  std::vector<size_t> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && inputs[i].is_floating_point() && inputs[i].requires_grad()) out.push_back(i);
  }
  return out;
}

std::vector<at::Tensor> detached_copies(const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> out;
  for (const auto& t : inputs) out.push_back(t.defined() ? t.detach().clone() : t);
  return out;
}

// Outputs as flat detached vectors (non-floating outputs become empty).
std::vector<at::Tensor> evaluate_flat(const TensorFunction& fn, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> out;
  for (const auto& y : fn(inputs)) {
    out.push_back(y.defined() && y.is_floating_point() ? y.detach().reshape({-1}).clone()
                                                       : at::empty({0}, at::kDouble));
  }
  return out;
}

// Analytical vector-Jacobian products vᵀ ∂y_o/∂x_i for every differentiable input.
std::vector<at::Tensor> vjp(const at::Tensor& output, const at::Tensor& cotangent,
                            const std::vector<at::Tensor>& inputs, const std::vector<size_t>& diff) {
  std::vector<at::Tensor> xs;
  for (size_t i : diff) xs.push_back(inputs[i]);
  std::vector<at::Tensor> grads;
  if (output.requires_grad()) {
    grads = torch::autograd::grad({output}, xs, {cotangent.view(output.sizes())}, /*retain_graph=*/true,
                                  /*create_graph=*/false, /*allow_unused=*/true);
  } else {
    grads.resize(xs.size());
  }
  for (size_t k = 0; k < grads.size(); ++k) {
    grads[k] = grads[k].defined() ? grads[k].detach().reshape({-1}) : at::zeros({xs[k].numel()}, xs[k].options());
  }
  return grads;
}

at::Tensor positive_unit(int64_t n, at::Generator& gen, const at::TensorOptions& options) {
  at::Tensor u = at::rand({n}, gen, at::TensorOptions().dtype(at::kDouble)).to(options.dtype());
  return u / u.norm();
}

GradcheckResult slow_mode(const TensorFunction& fn, const std::vector<at::Tensor>& inputs,
                          const std::vector<size_t>& diff, const GradcheckOptions& opt) {
  GradcheckResult result;
  // Numerical Jacobians: numeric[o][k] is [numel(y_o), numel(x_diff[k])].
  std::vector<at::Tensor> base = evaluate_flat(fn, detached_copies(inputs));
  std::vector<std::vector<at::Tensor>> numeric(base.size());
  for (size_t k = 0; k < diff.size(); ++k) {
    std::vector<at::Tensor> x = detached_copies(inputs);
    at::Tensor flat = x[diff[k]].view({-1});
    const int64_t n = flat.numel();
    for (size_t o = 0; o < base.size(); ++o) numeric[o].push_back(at::zeros({base[o].numel(), n}, base[o].options()));
    for (int64_t j = 0; j < n; ++j) {
      const double original = flat[j].item<double>();
      flat[j] = original + opt.eps;
      auto plus = evaluate_flat(fn, x);
      flat[j] = original - opt.eps;
      auto minus = evaluate_flat(fn, x);
      flat[j] = original;
      for (size_t o = 0; o < base.size(); ++o) {
        numeric[o][k].select(1, j).copy_((plus[o] - minus[o]) / (2.0 * opt.eps));
      }
    }
  }
  // Analytical Jacobians, one row (one output entry) at a time.
  std::vector<at::Tensor> outputs = fn(inputs);
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (base[o].numel() == 0) continue;
    std::vector<at::Tensor> analytic;
    for (size_t k = 0; k < diff.size(); ++k) analytic.push_back(at::zeros_like(numeric[o][k]));
    for (int64_t m = 0; m < base[o].numel(); ++m) {
      at::Tensor e = at::zeros({base[o].numel()}, base[o].options());
      e[m] = 1.0;
      auto rows = vjp(outputs[o], e, inputs, diff);
      for (size_t k = 0; k < diff.size(); ++k) analytic[k][m].copy_(rows[k]);
    }
    for (size_t k = 0; k < diff.size(); ++k) {
      at::Tensor error = (analytic[k] - numeric[o][k]).abs();
      at::Tensor allowed = opt.atol + opt.rtol * numeric[o][k].abs();
      result.compared += error.numel();
      if (error.numel() == 0) continue;
      result.max_abs_error = std::max(result.max_abs_error, error.max().item<double>());
      at::Tensor excess = error - allowed;
      const int64_t worst = excess.reshape({-1}).argmax().item<int64_t>();
      if (result.passed && excess.reshape({-1})[worst].item<double>() > 0) {
        const int64_t cols = error.size(1), row = worst / cols, col = worst % cols;
        result.passed = false;
        result.message = str_cat(
            "Jacobian mismatch for output ", o, " with respect to input ", diff[k], ": at (output entry ", row,
            ", input entry ", col, ") analytical ", format_sci(analytic[k][row][col].item<double>(), 6),
            " vs numerical ", format_sci(numeric[o][k][row][col].item<double>(), 6), ", |difference| ",
            format_sci(error[row][col].item<double>(), 3), " > atol ", opt.atol, " + rtol ", opt.rtol,
            " * |numerical|; ", (excess > 0).sum().item<int64_t>(), " of ", error.numel(), " entries out of tolerance");
      }
    }
  }
  return result;
}

GradcheckResult fast_mode(const TensorFunction& fn, const std::vector<at::Tensor>& inputs,
                          const std::vector<size_t>& diff, const GradcheckOptions& opt) {
  GradcheckResult result;
  at::Generator gen = make_generator(derive_seed(opt.seed, "gradcheck-fast"));
  std::vector<at::Tensor> base = evaluate_flat(fn, detached_copies(inputs));
  std::vector<at::Tensor> u, v;
  for (size_t i : diff) u.push_back(positive_unit(inputs[i].numel(), gen, inputs[i].options()));
  for (const auto& y : base) v.push_back(positive_unit(y.numel(), gen, y.options()));
  std::vector<at::Tensor> outputs = fn(inputs);
  for (size_t o = 0; o < base.size(); ++o) {
    if (base[o].numel() == 0) continue;
    auto analytic_rows = vjp(outputs[o], v[o], inputs, diff);
    for (size_t k = 0; k < diff.size(); ++k) {
      std::vector<at::Tensor> x = detached_copies(inputs);
      at::Tensor direction = u[k].view(x[diff[k]].sizes());
      x[diff[k]] += opt.eps * direction;
      auto plus = evaluate_flat(fn, x);
      x[diff[k]] -= 2.0 * opt.eps * direction;
      auto minus = evaluate_flat(fn, x);
      const double numerical = (v[o].dot((plus[o] - minus[o]) / (2.0 * opt.eps))).item<double>();
      const double analytical = analytic_rows[k].dot(u[k]).item<double>();
      const double atol = opt.atol * u[k].sum().item<double>() * v[o].sum().item<double>();
      const double error = std::abs(analytical - numerical);
      result.compared += 1;
      result.max_abs_error = std::max(result.max_abs_error, error);
      if (result.passed && error > atol + opt.rtol * std::abs(numerical)) {
        result.passed = false;
        result.message = str_cat("Jacobian mismatch (fast mode, v^T J u) for output ", o, " with respect to input ",
                                 diff[k], ": analytical ", format_sci(analytical, 6), " vs numerical ",
                                 format_sci(numerical, 6), ", |difference| ", format_sci(error, 3), " > scaled atol ",
                                 format_sci(atol, 3), " + rtol ", opt.rtol, " * |numerical|");
      }
    }
  }
  return result;
}

}  // namespace

GradcheckResult gradcheck(const TensorFunction& fn, const std::vector<at::Tensor>& inputs,
                          const GradcheckOptions& options) {
  const auto diff = differentiable_indices(inputs);
  if (diff.empty()) return {false, "gradcheck: no input is floating and requires grad", 0.0, 0};
  return options.fast_mode ? fast_mode(fn, inputs, diff, options) : slow_mode(fn, inputs, diff, options);
}

GradcheckResult gradgradcheck(const TensorFunction& fn, const std::vector<at::Tensor>& inputs,
                              const GradcheckOptions& options) {
  const auto diff = differentiable_indices(inputs);
  if (diff.empty()) return {false, "gradgradcheck: no input is floating and requires grad", 0.0, 0};
  at::Generator gen = make_generator(derive_seed(options.seed, "gradgradcheck-cotangents"));
  std::vector<at::Tensor> cotangents;
  {
    at::NoGradGuard no_grad;
    for (const auto& y : fn(detached_copies(inputs))) {
      if (!y.defined() || !y.is_floating_point()) continue;
      cotangents.push_back(at::randn(y.sizes(), gen, at::TensorOptions().dtype(at::kDouble)).to(y.scalar_type()));
    }
  }
  // g(x, v) = vᵀ ∂f/∂x, built so that it can itself be differentiated.
  const size_t n_inputs = inputs.size();
  TensorFunction first_derivative = [fn, n_inputs, diff](const std::vector<at::Tensor>& args) {
    std::vector<at::Tensor> x(args.begin(), args.begin() + n_inputs);
    for (size_t i : diff) {
      if (!x[i].requires_grad()) x[i] = x[i].detach().requires_grad_(true);
    }
    std::vector<at::Tensor> ys, vs, xs;
    auto outputs = fn(x);
    size_t c = n_inputs;
    for (const auto& y : outputs) {
      if (!y.defined() || !y.is_floating_point()) continue;
      const at::Tensor& v = args[c++];
      if (!y.requires_grad()) continue;
      ys.push_back(y);
      vs.push_back(v);
    }
    for (size_t i : diff) xs.push_back(x[i]);
    auto grads = torch::autograd::grad(ys, xs, vs, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) grads[k] = at::zeros_like(xs[k]);
    }
    return grads;
  };
  std::vector<at::Tensor> args = inputs;
  for (auto& v : cotangents) args.push_back(v.requires_grad_(true));
  GradcheckResult result = gradcheck(first_derivative, args, options);
  if (!result.passed) result.message = "second derivative (gradgradcheck): " + result.message;
  return result;
}

}  // namespace magic::checks
