// GELU with the normal CDF evaluated once per forward (the erf form, as at::gelu computes it):
//   y = x·Φ(x),  y' = Φ(x) + x·φ(x),  y'' = φ(x)·(2 − x²),  Φ(x) = (1 + erf(x/√2))/2,
//   φ(x) = exp(−x²/2)/√(2π).
// at::gelu evaluates erf again in its backward and in that backward's own derivative; in fp64
// erf was the costliest elementwise op of a REPLAY step (perf on replay_bench: 15% of the run). Here
// the forward keeps Φ, the backward forms φ (one exp) and builds the derivative from them with
// multiplications (differentiable through the slope function in gelu.cpp, whose own derivative
// recomputes only the exp), so a traced step and its vector-Jacobian product evaluate erf once.
// Every order of derivative is exact.
#pragma once

#include <ATen/ATen.h>

namespace magic {

// In fp64 erf comes from glibc's vector library (lib/core/vector_math.h: ~10x at::erf here), so the
// value is within a few ulp of at::gelu's rather than bit for bit; in fp32 at::gelu rounds
// differently (it is kept there: kernels::gelu).
at::Tensor gelu_erf(const at::Tensor& x);

}  // namespace magic
