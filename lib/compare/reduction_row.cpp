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

// Allowed on top of the bound before a scaled sum stops counting as uniform, and before a rounded
// one stops counting as one rounding: the least-squares scale carries the sum's own rounding too.
// Far below what it separates (a rounding to bf16 is 4e-3 of a value, the bound 3e-7).
constexpr double kSlack = 2.0;

// The entries of a reduction row, flattened to fp64: reduced g, exact c·e, magnitude c·m, and the
// underflow allowance c·R·η (units of lib/compare/reduction_row.h).
struct Entries {
  at::Tensor g, e, m;
  double underflow = 0.0;
};

// The scale k when g = k·c·e entry by entry up to the bound (k's own rounding included), k clearly
// not 1: a sum scaled as a whole, by a factor or a wrong normalizer, not a rounding of it.
std::optional<double> uniform_scale(const Entries& x, double k, double bound) {
  if (!std::isfinite(k) || std::abs(k - 1.0) <= kSlack * bound || !x.e.ne(0.0).any().item<bool>()) return std::nullopt;
  const at::Tensor off = (x.g - k * x.e).abs() - kSlack * bound * std::abs(k) * (x.m + x.underflow);
  return off.le(0.0).all().item<bool>() ? std::optional<double>(k) : std::nullopt;
}

// The coarser dtype the sum was rounded to, if it was: every entry of g/c fits it (a sum rounded
// to bf16 fits bf16 entirely, while an fp32 sum of bf16 terms needs more bits wherever two terms
// of different exponents meet), and every entry is within the roundings of a sum of R terms in it
// of the exact sum (Gloo rounds once after an fp32 sum, NCCL each partial sum). A sum of
// bf16-valued terms scaled by 2 fits bf16 too, but is a whole value off.
std::optional<c10::ScalarType> rounded_to(const Entries& x, double c, int64_t terms, double bound) {
  for (c10::ScalarType d : {c10::kBFloat16, c10::kHalf}) {
    if (representable_share(x.g / c, d) < 1.0) continue;
    const double u = unit_roundoff(d);
    const at::Tensor allowed = u * x.e.abs() + (gamma_bound(terms - 1, u) + kSlack * bound) * (x.m + x.underflow) +
                               c * static_cast<double>(terms) * smallest_subnormal(d);
    if ((x.g - x.e).abs().le(allowed).all().item<bool>()) return d;
  }
  return std::nullopt;
}

// n of the bound γ_{n−1}: R, or R + M with M > 1 micro-batches (reduction_row.h).
int64_t gamma_terms(const ReductionTerms& t) {
  return t.terms + (t.micro_batches > 1 ? t.micro_batches : 0);
}

// " over 4 ranks", " over 2 ranks x 4 micro-batches"
std::string terms_text(const ReductionTerms& t) {
  return str_cat(" over ", t.terms, " ranks",
                 t.micro_batches > 1 ? str_cat(" x ", t.micro_batches, " micro-batches") : "");
}

// "2.000"; more digits where three would read as 1.
std::string scale_text(double k) {
  const std::string short_text = format_fixed(k, 3);
  return short_text == "1.000" ? format_fixed(k, 6) : short_text;
}

}  // namespace

CheckRow make_reduction_row(const std::string& level, const std::string& tensor, const at::Tensor& reduced,
                            const ReductionTerms& t, c10::ScalarType reduce, c10::ScalarType master,
                            const std::vector<NamedFactor>& factors, const StepShape& step_shape) {
  CheckRow row;
  row.level = level;
  row.tensor = tensor;
  row.stats = compare_tensors(reduced, t.exact);
  Entries x;
  x.g = reduced.detach().to(at::kDouble).reshape({-1});
  x.e = t.exact.detach().to(at::kDouble).reshape({-1});
  x.m = t.magnitude.detach().to(at::kDouble).reshape({-1});
  x.underflow = t.c * static_cast<double>(t.terms * t.micro_batches) * smallest_subnormal(reduce);
  const at::Tensor error = (x.g - x.e).abs();
  const at::Tensor relative = error / (x.m + x.underflow);  // 0/0 cannot occur: underflow > 0

  ReductionErrors r;
  r.terms = t.terms;
  r.bound = gamma_bound(gamma_terms(t) - 1, unit_roundoff(reduce)) + 2.0 * unit_roundoff(master);
  if (x.g.numel() > 0) {
    r.worst = relative.max().item<double>();
    r.entries_over = relative.gt(r.bound).sum().item<int64_t>();
    const at::Tensor nonzero = x.e.ne(0.0);
    if (nonzero.any().item<bool>()) {
      r.typical_error = (error.masked_select(nonzero) / x.e.masked_select(nonzero).abs()).median().item<double>();
    }
  }
  row.tolerance = r.bound;
  row.passed = std::isfinite(r.worst) && r.worst <= r.bound;
  row.reduction = r;
  if (fail_if_not_finite(row, {{"distributed tensor", reduced}, {"exact sum of its terms", t.exact}}, step_shape)) {
    return row;
  }
  row.diagnosis = diagnose(row.stats, row.passed, factors);
  if (row.passed || row.diagnosis.exact) return row;  // passed, or exactly a topology factor
  // A uniform scale that is no factor exactly: "≈ x dp" names the blur of unequal shards, which
  // a sum scaled as a whole is not.
  if (const auto k = uniform_scale(x, row.stats.scale, r.bound)) {
    row.diagnosis = Diagnosis{};
    row.diagnosis.text =
        str_cat("uniform scale ", scale_text(*k), " of the exact sum", terms_text(t), ": every entry is ",
                scale_text(*k), " x the sum within the bound (no topology factor)");
    return row;
  }
  if (!row.diagnosis.factors.empty()) return row;
  std::string text = str_cat("summed coarser than ", dtype_name(reduce), terms_text(t), ": ", r.entries_over, " of ",
                             x.g.numel(), " entries beyond the bound, worst ", format_sci(r.worst, 1),
                             " of the terms' magnitude (bound ", format_sci(r.bound, 1), ")");
  if (const auto d = rounded_to(x, t.c, gamma_terms(t), r.bound)) {
    text += str_cat("; every entry of the sum fits ", dtype_name(*d), ": it was rounded to ", dtype_name(*d));
  } else {
    text += str_cat("; median error ", format_sci(r.typical_error, 1), " of a value");
  }
  row.diagnosis.text = text;
  return row;
}

}  // namespace magic
