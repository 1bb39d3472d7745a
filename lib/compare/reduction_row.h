// The row of a gradient reduction judged against the exact sum of its own terms (the bound is
// stated and derived in checks/reduction_probe.h and docs/magic-check.md, "Mixed precision"): it passes when
// every entry g_i of the reduced gradient satisfies
//   |g_i − c·e_i| <= (γ_{R−1}(u_reduce) + 2·u_master) · c·(m_i + R·η_reduce)
// (e = Σ_r x_r and m = Σ_r |x_r| over the R ranks' local gradients, in fp64). With M > 1
// micro-batches (each reduced on its own, the M sums accumulated in master, the total rounded once
// more to the reduce dtype) e and m run over every rank's every micro-batch, R·η becomes R·M·η and
// γ_{R−1} becomes γ_{R+M−1}: (1 + γ_{R−1})(1 + γ_{M−1})(1 + u) <= 1 + γ_{R+M−1} for u_master <= u_reduce
// (Higham, Lemma 3.3: γ_a + γ_b + γ_a·γ_b <= γ_{a+b}). A failing row names
// a topology factor when g is a scaled sum (a uniform scale of the exact sum when no factor is
// it), else how far off it is and, when every entry of the sum fits a coarser dtype and is within
// the rounding of a sum in it, that the sum was rounded to it. A row whose reduced gradient or
// exact sum is not finite fails saying where (finite_rows.h; `step_shape` as there).
#pragma once

#include "lib/compare/check_row.h"

namespace magic {

struct ReductionTerms {
  at::Tensor exact, magnitude;  // c·e, c·m
  int64_t terms = 0;            // R
  double c = 1.0;
  int64_t micro_batches = 1;  // M
};

// γ_n(u) = n·u / (1 − n·u)
double gamma_bound(int64_t n, double u);

// The smallest positive (subnormal) value of a floating dtype.
double smallest_subnormal(c10::ScalarType dtype);

CheckRow make_reduction_row(const std::string& level, const std::string& tensor, const at::Tensor& reduced,
                            const ReductionTerms& terms, c10::ScalarType reduce, c10::ScalarType master,
                            const std::vector<NamedFactor>& factors, const StepShape& step_shape = {});

}  // namespace magic
