// LayerNorm over the last dimension whose backward's own derivative (REPLAY's product
// differentiates a traced backward) is one pass over the rows instead of LibTorch's
// layer_norm_double_backward, a composite of some forty kernels:
//   x̂ = (x − μ)·r,  r = (σ² + ε)^(−1/2),  y = γ·x̂ + β;  with h = gy·γ and P(v) = v − mean(v) − x̂·mean(v·x̂):
//   gx = r·P(h),  gγ = Σ_rows gy·x̂,  gβ = Σ_rows gy   (at::native_layer_norm_backward, bit for bit)
// and, for cotangents a, c, e of gx, gγ, gβ (per row; sums and means over the D features):
//   ∂/∂gy = γ·r·P(a) + c·x̂ + e,   ∂/∂γ = Σ_rows gy·r·P(a),
//   ∂/∂x  = r·P(c·gy) − (r²/D)·[(⟨a,h⟩ − mean(h)·Σa − ⟨h,x̂⟩⟨a,x̂⟩/D)·x̂ + ⟨h,x̂⟩·P(a) + ⟨a,x̂⟩·P(h)].
// The forward and the first backward are LibTorch's kernels. Under grad mode (a derivative of
// the third order) the second derivative is formed from differentiable ops instead.
// fp64 and fp32 on the CPU with weight and bias; at::layer_norm otherwise.
#pragma once

#include <ATen/ATen.h>

namespace magic {

at::Tensor layer_norm_rows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

}  // namespace magic
