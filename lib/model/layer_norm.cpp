#include "lib/model/layer_norm.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace magic {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kRowsABlock = 64;  // λγ is summed a block of rows at a time, then over blocks

at::Tensor or_zeros(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() ? t : at::zeros_like(like);
}

// The formulas of layer_norm.h over rows [R, D], each factor a row's value: x̂ and r from x,
// so that a derivative of this one (the third order) is taken through them.
std::vector<at::Tensor> second_derivative_of_ops(const at::Tensor& gy, const at::Tensor& x, const at::Tensor& gamma,
                                                 double eps, const at::Tensor& a, const at::Tensor& c,
                                                 const at::Tensor& e) {
  const double D = static_cast<double>(x.size(-1));
  const at::Tensor centred = x - x.mean(-1, true);
  const at::Tensor r = at::rsqrt((centred * centred).mean(-1, true) + eps);
  const at::Tensor xhat = centred * r;
  auto P = [&](const at::Tensor& v) { return v - v.mean(-1, true) - xhat * (v * xhat).mean(-1, true); };
  const at::Tensor h = gy * gamma, u = gy * c;
  const at::Tensor pa = P(a), rpa = r * pa;
  const at::Tensor sa = a.sum(-1, true), ax = (a * xhat).sum(-1, true), hx = (h * xhat).sum(-1, true);
  const at::Tensor ah = (a * h).sum(-1, true), mh = h.mean(-1, true);
  const at::Tensor dx = r * P(u) - (r * r / D) * ((ah - mh * sa - hx * ax / D) * xhat + hx * pa + ax * P(h));
  return {gamma * rpa + c * xhat + e, dx, (gy * rpa).sum(0)};
}

// The same in one pass over the rows (no graph): mean and rstd as the forward's kernel formed them.
template <typename T>
void second_derivative_rows(const T* gy, const T* x, const T* gamma, const T* mean, const T* rstd, const T* a,
                            const T* c, const T* e, int64_t R, int64_t D, T* dgy, T* dx, double* dgamma_blocks) {
  const int64_t blocks = (R + kRowsABlock - 1) / kRowsABlock;
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    std::vector<double> xhat(static_cast<size_t>(D)), h(static_cast<size_t>(D));
    for (int64_t b = first; b < last; ++b) {
      double* dgamma = dgamma_blocks + b * D;
      for (int64_t i = b * kRowsABlock; i < std::min(R, (b + 1) * kRowsABlock); ++i) {
        const T *gy_i = gy + i * D, *x_i = x + i * D, *a_i = a + i * D;
        const double r = static_cast<double>(rstd[i]), mu = static_cast<double>(mean[i]);
        double sa = 0, ax = 0, sh = 0, hx = 0, ah = 0, su = 0, ux = 0;
        for (int64_t j = 0; j < D; ++j) {
          const double xh = (static_cast<double>(x_i[j]) - mu) * r, hj = static_cast<double>(gy_i[j] * gamma[j]);
          const double aj = static_cast<double>(a_i[j]), uj = static_cast<double>(gy_i[j] * c[j]);
          xhat[j] = xh;
          h[j] = hj;
          sa += aj, ax += aj * xh, sh += hj, hx += hj * xh, ah += aj * hj, su += uj, ux += uj * xh;
        }
        const double inv = 1.0 / static_cast<double>(D);
        const double k = ah - sh * inv * sa - hx * ax * inv, r2 = r * r * inv;
        for (int64_t j = 0; j < D; ++j) {
          const double xh = xhat[j], aj = static_cast<double>(a_i[j]);
          const double pa = aj - sa * inv - xh * ax * inv, ph = h[j] - sh * inv - xh * hx * inv;
          const double pu = static_cast<double>(gy_i[j] * c[j]) - su * inv - xh * ux * inv;
          dgy[i * D + j] = static_cast<T>(static_cast<double>(gamma[j]) * r * pa + static_cast<double>(c[j]) * xh +
                                          static_cast<double>(e[j]));
          dx[i * D + j] = static_cast<T>(r * pu - r2 * (k * xh + hx * pa + ax * ph));
          dgamma[j] += static_cast<double>(gy_i[j]) * r * pa;
        }
      }
    }
  });
}

std::vector<at::Tensor> second_derivative_fused(const at::Tensor& gy, const at::Tensor& x, const at::Tensor& gamma,
                                                const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& a,
                                                const at::Tensor& c, const at::Tensor& e) {
  const int64_t D = x.size(-1), R = x.numel() / std::max<int64_t>(D, 1);
  const at::Tensor gy_c = gy.contiguous(), x_c = x.contiguous(), a_c = a.contiguous();
  const at::Tensor gamma_c = gamma.contiguous(), c_c = c.contiguous(), e_c = e.contiguous();
  const at::Tensor mean_c = mean.contiguous(), rstd_c = rstd.contiguous();
  at::Tensor dgy = at::empty_like(x_c), dx = at::empty_like(x_c);
  const int64_t blocks = (R + kRowsABlock - 1) / kRowsABlock;
  at::Tensor dgamma_blocks = at::zeros({std::max<int64_t>(blocks, 1), D}, x.options().dtype(at::kDouble));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_norm_second_derivative", [&] {
    second_derivative_rows<scalar_t>(gy_c.data_ptr<scalar_t>(), x_c.data_ptr<scalar_t>(), gamma_c.data_ptr<scalar_t>(),
                                     mean_c.data_ptr<scalar_t>(), rstd_c.data_ptr<scalar_t>(), a_c.data_ptr<scalar_t>(),
                                     c_c.data_ptr<scalar_t>(), e_c.data_ptr<scalar_t>(), R, D, dgy.data_ptr<scalar_t>(),
                                     dx.data_ptr<scalar_t>(), dgamma_blocks.data_ptr<double>());
  });
  return {dgy, dx, dgamma_blocks.sum(0).to(x.scalar_type())};
}

// (gy, x, γ) -> (gx, gγ, gβ), LibTorch's kernel; mean and rstd are the forward's (functions of x
// that the second derivative accounts for, not inputs of their own).
struct LayerNormBackward : public torch::autograd::Function<LayerNormBackward> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& gy, const at::Tensor& x, const at::Tensor& gamma,
                               const at::Tensor& beta, const at::Tensor& mean, const at::Tensor& rstd, double eps) {
    ctx->save_for_backward({gy, x, gamma, mean, rstd});
    ctx->saved_data["eps"] = eps;
    auto [gx, dgamma, dbeta] =
        at::native_layer_norm_backward(gy, x, {x.size(-1)}, mean, rstd, gamma, beta, {true, true, true});
    return {gx, dgamma, dbeta};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &gy = s[0], &x = s[1], &gamma = s[2];
    const int64_t D = x.size(-1);
    const at::Tensor a = or_zeros(grad[0], x).reshape({-1, D}), c = or_zeros(grad[1], gamma),
                     e = or_zeros(grad[2], gamma);
    std::vector<at::Tensor> d;
    const auto batched = [](const at::Tensor& t) { return t.key_set().has(c10::DispatchKey::Batched); };
    if (at::GradMode::is_enabled() || batched(a) || batched(c) || batched(e) || batched(gy)) {
      d = second_derivative_of_ops(gy.reshape({-1, D}), x.reshape({-1, D}), gamma, ctx->saved_data["eps"].toDouble(), a,
                                   c, e);
    } else {
      d = second_derivative_fused(gy, x, gamma, s[3], s[4], a, c, e);
    }
    return {d[0].view(x.sizes()), d[1].view(x.sizes()), d[2], at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct LayerNorm : public torch::autograd::Function<LayerNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta,
                            double eps) {
    auto [y, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, gamma, beta, eps);
    ctx->save_for_backward({x, gamma, beta, mean, rstd});
    ctx->saved_data["eps"] = eps;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list s = ctx->get_saved_variables();
    const variable_list g =
        LayerNormBackward::apply(grad[0], s[0], s[1], s[2], s[3], s[4], ctx->saved_data["eps"].toDouble());
    return {g[0], g[1], g[2], at::Tensor()};
  }
};

}  // namespace

at::Tensor layer_norm_rows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  const bool fits = x.device().is_cpu() && (x.scalar_type() == at::kDouble || x.scalar_type() == at::kFloat) &&
                    weight.defined() && bias.defined() && weight.scalar_type() == x.scalar_type() &&
                    bias.scalar_type() == x.scalar_type() && x.dim() >= 1 && x.numel() > 0 &&
                    !x.key_set().has(c10::DispatchKey::Batched);
  if (!fits) return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  return LayerNorm::apply(x, weight, bias, eps);
}

}  // namespace magic
