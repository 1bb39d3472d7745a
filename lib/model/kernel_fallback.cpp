#include "lib/model/kernel_fallback.h"

#include <cmath>

#include "lib/model/batched_matmul.h"
#include "lib/model/gelu.h"
#include "lib/model/layer_norm.h"

namespace magic::kernels {
namespace {

at::Tensor wide(const at::Tensor& t) {
  return t.defined() ? t.to(at::kFloat) : t;
}

}  // namespace

bool needs_fp32(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf && t.device().is_cpu();
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!needs_fp32(x)) return at::linear(x, weight, bias);
  return at::linear(wide(x), wide(weight), wide(bias)).to(x.scalar_type());
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  if (!needs_fp32(a)) return batched_matmul(a, b);
  return batched_matmul(wide(a), wide(b)).to(a.scalar_type());
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  if (!needs_fp32(x)) return layer_norm_rows(x, weight, bias, eps);
  return at::layer_norm(wide(x), {x.size(-1)}, wide(weight), wide(bias), eps).to(x.scalar_type());
}

at::Tensor softmax(const at::Tensor& x, int64_t dim) {
  if (!needs_fp32(x)) return at::softmax(x, dim);
  return at::softmax(wide(x), dim).to(x.scalar_type());
}

at::Tensor gelu(const at::Tensor& x) {
  if (x.scalar_type() == at::kDouble) return gelu_erf(x);  // gelu.h
  if (!needs_fp32(x)) return at::gelu(x);
  return at::gelu(wide(x)).to(x.scalar_type());
}

at::Tensor gelu_tanh(const at::Tensor& x) {
  if (needs_fp32(x)) return gelu_tanh(wide(x)).to(x.scalar_type());
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + at::tanh(k * (x + 0.044715 * x * x * x)));
}

at::Tensor sigmoid(const at::Tensor& x) {
  if (!needs_fp32(x)) return at::sigmoid(x);
  return at::sigmoid(wide(x)).to(x.scalar_type());
}

at::Tensor relu(const at::Tensor& x) {
  if (!needs_fp32(x)) return at::relu(x);
  return at::relu(wide(x)).to(x.scalar_type());
}

}  // namespace magic::kernels
