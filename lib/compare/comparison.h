// Comparison of a distributed tensor d with its reference r (docs/magic-check.md,
// "Columns, tolerance and diagnosis"):
//   scale          <d, r> / <r, r>            the factor a pure scaling error shows exactly
//   mean_ratio     mean of d/r over entries with |r| > 1e-3 max|r|   ("mean(dist/ref)")
//   worst_rel_err  max|d - r| / max(max|r|, error_scale)
// error_scale (default 0) is the size of the terms a tensor is a sum of, where it can be far
// above max|r|: a per-document score is the sum of its tokens' scores, which cancel to ~0 under
// gradient clipping (the clip is scale-invariant in the document's weights), and its rounding
// error is ~u·Σ_t|r_t|, not ~u·|r|.
//   cosine         <d, r> / (|d| |r|)
//   residual       |d - scale·r| / |scale·r|: how far d is from a pure scaling of r (0: exactly one)
//   effective_entries  (Σr²)² / Σr⁴: how many entries carry r's length (one dominant entry: 1)
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace magic {

struct ComparisonStats {
  double scale = 1.0;
  double mean_ratio = 1.0;
  double worst_rel_err = 0.0;
  double cosine = 1.0;
  int64_t numel = 0;
  double reference_norm = 0.0;
  double distributed_norm = 0.0;
  double residual = 0.0;
  double effective_entries = 0.0;
};

// Computed in fp64 whatever the inputs' dtype; shapes must match.
ComparisonStats compare_tensors(const at::Tensor& distributed, const at::Tensor& reference, double error_scale = 0.0);

// The allowed worst relative error for a dtype: fp64 1e-9, fp32 1e-4, bf16 3e-2, fp16 1e-2.
double default_tolerance(c10::ScalarType dtype);

}  // namespace magic
