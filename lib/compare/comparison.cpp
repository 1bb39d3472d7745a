#include "lib/compare/comparison.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "lib/core/strings.h"

namespace magic {

ComparisonStats compare_tensors(const at::Tensor& distributed, const at::Tensor& reference, double error_scale) {
  if (distributed.sizes() != reference.sizes()) {
    throw std::invalid_argument(str_cat("compare_tensors: shapes ", distributed.sizes(), " and ", reference.sizes()));
  }
  const at::Tensor d = distributed.detach().to(at::kDouble).reshape({-1});
  const at::Tensor r = reference.detach().to(at::kDouble).reshape({-1});
  ComparisonStats s;
  s.numel = d.numel();
  if (s.numel == 0) return s;
  const double rr = r.dot(r).item<double>(), dd = d.dot(d).item<double>(), dr = d.dot(r).item<double>();
  s.reference_norm = std::sqrt(rr);
  s.distributed_norm = std::sqrt(dd);
  const double max_r = r.abs().max().item<double>();
  if (rr == 0.0) {
    // Nothing to compare against: equal only if the distributed tensor is zero too.
    const bool zero = dd == 0.0;
    s.scale = zero ? 1.0 : std::numeric_limits<double>::infinity();
    s.mean_ratio = s.scale;
    s.cosine = zero ? 1.0 : 0.0;
    s.worst_rel_err = zero ? 0.0 : std::numeric_limits<double>::infinity();
    return s;
  }
  s.scale = dr / rr;
  s.cosine = dd == 0.0 ? 0.0 : dr / std::sqrt(dd * rr);
  s.residual = s.scale == 0.0 ? std::numeric_limits<double>::infinity()
                              : (d - s.scale * r).norm().item<double>() / (std::abs(s.scale) * s.reference_norm);
  // Σr⁴ of r / max|r| (r⁴ of a tiny r underflows; the ratio does not depend on the unit).
  const at::Tensor unit = r / max_r;
  s.effective_entries = std::pow(unit.dot(unit).item<double>(), 2) / unit.pow(4).sum().item<double>();
  s.worst_rel_err = (d - r).abs().max().item<double>() / std::max(max_r, error_scale);
  const at::Tensor significant = r.abs() > 1e-3 * max_r;
  s.mean_ratio = (d.masked_select(significant) / r.masked_select(significant)).mean().item<double>();
  return s;
}

double default_tolerance(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kDouble:
      return 1e-9;
    case c10::kFloat:
      return 1e-4;
    case c10::kBFloat16:
      return 3e-2;
    case c10::kHalf:
      return 1e-2;
    default:
      return 1e-9;
  }
}

}  // namespace magic
