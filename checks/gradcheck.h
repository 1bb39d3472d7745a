// Finite-difference checks of autograd derivatives, with torch.autograd.gradcheck's defaults
// (fp64, eps 1e-6, atol 1e-5, rtol 1e-3).
//   slow mode: the full Jacobian, column by column by central differences, against the
//              analytical Jacobian row by row by vector-Jacobian products; |a - n| <= atol + rtol |n|.
//   fast mode: one number per (output, input) pair, vᵀ J u with random positive unit u, v;
//              atol is scaled by (Σu)(Σv), the all-ones bound on vᵀ E u.
// gradgradcheck applies gradcheck to the function (x, v) -> vᵀ ∂f/∂x built with create_graph,
// so it checks second derivatives (Hessian-vector products) the same way.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

namespace magic::checks {

using TensorFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool fast_mode = false;
  uint64_t seed = 0;  // for fast mode's u, v and gradgradcheck's cotangents
};

struct GradcheckResult {
  bool passed = true;
  std::string message;         // which output and input mismatch, where and by how much
  double max_abs_error = 0.0;  // over every compared entry
  int64_t compared = 0;        // entries (slow) or vᵀJu products (fast) compared
};

// Differentiates with respect to the inputs that are floating and require grad.
GradcheckResult gradcheck(const TensorFunction& fn, const std::vector<at::Tensor>& inputs,
                          const GradcheckOptions& options = {});

GradcheckResult gradgradcheck(const TensorFunction& fn, const std::vector<at::Tensor>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace magic::checks
