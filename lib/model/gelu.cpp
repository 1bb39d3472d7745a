#include "lib/model/gelu.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "lib/core/vector_math.h"

namespace magic {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kInvSqrt2Pi = M_2_SQRTPI * M_SQRT1_2 * 0.5;  // 1/√(2π), as at::gelu_backward forms it

// s(x) = Φ(x) + x·φ(x) from Φ and φ already computed; s'(x) = φ(x)·(2 − x²), built from x alone so
// that it is differentiable again.
struct GeluSlope : public torch::autograd::Function<GeluSlope> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cdf, const at::Tensor& pdf) {
    ctx->save_for_backward({x});
    return cdf + x * pdf;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    // Differentiable again (REPLAY's product differentiates a traced backward), so at::exp.
    const at::Tensor pdf = at::exp(-0.5 * x * x) * kInvSqrt2Pi;
    return {grad[0] * pdf * (2.0 - x * x), at::Tensor(), at::Tensor()};
  }
};

struct Gelu : public torch::autograd::Function<Gelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    const at::Tensor cdf = 0.5 * (1.0 + vector_erf(x * M_SQRT1_2));
    ctx->save_for_backward({x, cdf});
    return x * cdf;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    // φ here, not in the forward: a forward without a backward (no grad) never needs it. It enters
    // the slope as a constant; GeluSlope's own backward carries its derivative.
    at::Tensor pdf;
    {
      at::NoGradGuard constant;
      pdf = at::exp(-0.5 * saved[0] * saved[0]) * kInvSqrt2Pi;
    }
    return {grad[0] * GeluSlope::apply(saved[0], saved[1], pdf)};
  }
};

}  // namespace

at::Tensor gelu_erf(const at::Tensor& x) {
  return Gelu::apply(x);
}

}  // namespace magic
