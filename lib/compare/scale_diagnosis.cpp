#include "lib/compare/scale_diagnosis.h"

#include <cmath>
#include <limits>

#include "lib/core/strings.h"

namespace magic {

std::vector<NamedFactor> candidate_factors(const std::vector<std::pair<std::string, int64_t>>& sizes) {
  std::vector<NamedFactor> out;
  std::vector<std::pair<std::string, int64_t>> usable;
  for (const auto& s : sizes) {
    if (s.second > 1) usable.push_back(s);
  }
  for (const auto& [name, n] : usable) out.push_back({"x " + name, static_cast<double>(n)});
  for (const auto& [name, n] : usable) out.push_back({"1/" + name, 1.0 / static_cast<double>(n)});
  for (size_t i = 0; i < usable.size(); ++i) {
    for (size_t j = i + 1; j < usable.size(); ++j) {
      const std::string name = usable[i].first + "*" + usable[j].first;
      const double v = static_cast<double>(usable[i].second * usable[j].second);
      out.push_back({"x " + name, v});
      out.push_back({"1/" + name, 1.0 / v});
    }
  }
  return out;
}

namespace {

// Every factor within `tolerance` of `scale`, the preferred one first: "x dp = x world".
// Products of two sizes are named only when no single size explains the scale. With
// `nearest_only` only the factors nearest to the scale in ratio are named: ≈ 3.07 with dp=4 and
// cp=3 is "≈ x cp", though 3.07/4 is within the tolerance too; likewise an exact match under
// low-precision noise, whose tolerance can be wide (0.2503 in bf16 scores is "1/dp", not
// "1/dp = 1/cp"). Equal sizes stay equally near: "x n_per_block = x n_ppgd".
std::vector<std::string> matching(const std::vector<NamedFactor>& factors, double scale, double tolerance,
                                  bool nearest_only = false) {
  std::vector<const NamedFactor*> single, product;
  for (const auto& f : factors) {
    if (std::abs(scale / f.value - 1.0) > tolerance) continue;
    (f.name.find('*') == std::string::npos ? single : product).push_back(&f);
  }
  const auto& chosen = single.empty() ? product : single;
  auto distance = [&](const NamedFactor* f) { return std::abs(std::log(scale / f->value)); };
  double best = std::numeric_limits<double>::infinity();
  for (const auto* f : chosen) best = std::min(best, distance(f));
  std::vector<std::string> names;
  for (const auto* f : chosen) {
    if (!nearest_only || distance(f) <= best + 1e-12) names.push_back(f->name);
  }
  return names;
}

}  // namespace

Diagnosis diagnose(const ComparisonStats& s, bool passed, const std::vector<NamedFactor>& factors,
                   double direction_noise) {
  Diagnosis d;
  if (passed) return d;
  if (s.distributed_norm == 0.0) {
    d.text = "distributed tensor is zero";
    return d;
  }
  if (s.reference_norm == 0.0) {
    d.text = "reference is zero but the distributed tensor is not";
    return d;
  }
  if (s.cosine >= 1.0 - direction_noise) {
    // Rounding noise e blurs the scale too (by about e = sqrt(direction_noise)).
    const double tolerance = std::max(1e-3, std::sqrt(direction_noise));
    d.factors = matching(factors, s.scale, tolerance, /*nearest_only=*/true);
    if (!d.factors.empty()) {
      d.scale_tolerance = tolerance;
      d.text = str_cat(join(d.factors, " or "), " (scale ", format_fixed(s.scale, 6), ")");
      d.factor = d.factors.front();
      d.exact = true;
      return d;
    }
    if (std::abs(s.scale - 1.0) < 1e-3) {
      d.text = str_cat("small difference (worst relative error ", format_sci(s.worst_rel_err, 1),
                       "): terms missing or extra, not a scaling");
      return d;
    }
    if (matching(factors, s.scale, 0.25, /*nearest_only=*/true).empty()) {
      d.text = str_cat("scale ", format_fixed(s.scale, 6), ", no topology factor");
      return d;
    }
  }
  if (s.cosine >= 0.9) {
    d.factors = matching(factors, s.scale, 0.25, /*nearest_only=*/true);
    if (!d.factors.empty()) {
      d.scale_tolerance = 0.25;
      d.text = str_cat("≈ ", join(d.factors, " or "), " (scale ", format_fixed(s.scale, 4), ", cosine ",
                       format_fixed(s.cosine, 4), ")");
      d.factor = d.factors.front();
      return d;
    }
  }
  d.text = str_cat("direction differs (cosine ", format_fixed(s.cosine, 6), ", scale ", format_fixed(s.scale, 4),
                   "): terms missing or extra, not a scaling");
  return d;
}

namespace {

constexpr double kExactScaleResidual = 0.01;
constexpr double kExactScaleEntries = 16.0;
constexpr double kExactScaleBeyond = 1.1;

}  // namespace

bool is_exact_scale(const ComparisonStats& s) {
  if (!(s.scale > 0.0) || !std::isfinite(s.scale)) return false;
  return s.residual <= kExactScaleResidual && s.cosine >= 1.0 - 1e-4 && s.effective_entries >= kExactScaleEntries &&
         std::abs(std::log(s.scale)) > std::log(kExactScaleBeyond);
}

Diagnosis diagnose_exact_scale(const ComparisonStats& s, const std::vector<NamedFactor>& factors) {
  Diagnosis d;
  d.factors = matching(factors, s.scale, kExactScaleResidual, /*nearest_only=*/true);
  if (d.factors.empty()) {
    d.text = str_cat("scale ", format_fixed(s.scale, 6), ", no topology factor");
    return d;
  }
  d.text = str_cat(join(d.factors, " or "), " (scale ", format_fixed(s.scale, 6), ")");
  d.factor = d.factors.front();
  d.exact = true;
  d.scale_tolerance = kExactScaleResidual;
  return d;
}

}  // namespace magic
