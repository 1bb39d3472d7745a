// A tensor whose value is x and whose derivative is scaled: the building block of conventions
// that count a replicated value's cotangent once (three_pool_spd.cpp) and of planted bugs that
// scale a cotangent without touching a value (checks/planted_*).
#pragma once

#include <ATen/ATen.h>

namespace magic {

// Value x exactly, derivative scale·∂x at every order: x̄ + (s·x − s·x̄), x̄ = x detached.
inline at::Tensor with_derivative_scale(const at::Tensor& x, double scale) {
  const at::Tensor scaled = x * scale;
  return x.detach() + (scaled - scaled.detach());
}

}  // namespace magic
