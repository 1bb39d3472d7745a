#include "lib/compare/reduction_row.h"

#include <cmath>
#include <limits>
#include <optional>

#include "lib/core/dtype.h"
#include "lib/core/precision_policy.h"
#include "lib/core/strings.h"

namespace magic {

double gamma_bound(int64_t n, double u) {
  const double nu = static_cast<double>(n) * u;
  return nu < 1.0 ? nu / (1.0 - nu) : std::numeric_limits<double>::infinity();
}

double smallest_subnormal(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kHalf:
      return std::ldexp(1.0, -24);
    case c10::kBFloat16:
      return std::ldexp(1.0, -133);
    case c10::kFloat:
      return std::ldexp(1.0, -149);
    default:
      return std::numeric_limits<double>::denorm_min();
  }
}

namespace {

// The coarsest dtype that holds every entry of the sum exactly, if any: a sum rounded to bf16
// (Gloo rounds once after an fp32 sum, NCCL each partial sum) fits bf16 entirely, while an fp32 sum
// of bf16 terms needs more bits wherever two terms of different exponents meet.
std::optional<c10::ScalarType> all_fit(const at::Tensor& sum) {
  for (c10::ScalarType d : {c10::kBFloat16, c10::kHalf}) {
    if (representable_share(sum, d) == 1.0) return d;
  }
  return std::nullopt;
}

}  // namespace

CheckRow make_reduction_row(const std::string& level, const std::string& tensor, const at::Tensor& reduced,
                            const ReductionTerms& t, c10::ScalarType reduce, c10::ScalarType master,
                            const std::vector<NamedFactor>& factors, const StepShape& step_shape) {
  CheckRow row;
  row.level = level;
  row.tensor = tensor;
  row.stats = compare_tensors(reduced, t.exact);
  const at::Tensor g = reduced.detach().to(at::kDouble).reshape({-1});
  const at::Tensor e = t.exact.detach().to(at::kDouble).reshape({-1});
  const at::Tensor m = t.magnitude.detach().to(at::kDouble).reshape({-1});
  const at::Tensor error = (g - e).abs();
  const double underflow = t.c * static_cast<double>(t.terms) * smallest_subnormal(reduce);
  const at::Tensor relative = error / (m + underflow);  // 0/0 cannot occur: underflow > 0

  ReductionErrors r;
  r.terms = t.terms;
  r.bound = gamma_bound(t.terms - 1, unit_roundoff(reduce)) + 2.0 * unit_roundoff(master);
  if (g.numel() > 0) {
    r.worst = relative.max().item<double>();
    r.entries_over = relative.gt(r.bound).sum().item<int64_t>();
    const at::Tensor nonzero = e.ne(0.0);
    if (nonzero.any().item<bool>()) {
      r.typical_error = (error.masked_select(nonzero) / e.masked_select(nonzero).abs()).median().item<double>();
    }
  }
  row.tolerance = r.bound;
  row.passed = std::isfinite(r.worst) && r.worst <= r.bound;
  row.reduction = r;
  if (fail_if_not_finite(row, {{"distributed tensor", reduced}, {"exact sum of its terms", t.exact}}, step_shape)) {
    return row;
  }
  row.diagnosis = diagnose(row.stats, row.passed, factors);
  if (!row.passed && row.diagnosis.factors.empty()) {
    std::string text = str_cat("summed coarser than ", dtype_name(reduce), " over ", t.terms,
                               " ranks: ", r.entries_over, " of ", g.numel(), " entries beyond the bound, worst ",
                               format_sci(r.worst, 1), " of the terms' magnitude (bound ", format_sci(r.bound, 1), ")");
    if (const auto fits = all_fit(g / t.c)) {
      text += str_cat("; every entry of the sum fits ", dtype_name(*fits), ": it was rounded to ", dtype_name(*fits));
    } else {
      text += str_cat("; median error ", format_sci(r.typical_error, 1), " of a value");
    }
    row.diagnosis.text = text;
  }
  return row;
}

}  // namespace magic
