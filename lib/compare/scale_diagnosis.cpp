#include "lib/compare/scale_diagnosis.h"

#include <cmath>

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

// Every factor within `tolerance` of `scale`, the first (preferred) name first: "x dp = x world".
std::string matching(const std::vector<NamedFactor>& factors, double scale, double tolerance, std::string& first) {
  std::vector<std::string> names;
  for (const auto& f : factors) {
    if (std::abs(scale / f.value - 1.0) <= tolerance) names.push_back(f.name);
  }
  first = names.empty() ? "" : names.front();
  return join(names, " = ");
}

}  // namespace

Diagnosis diagnose(const ComparisonStats& s, bool passed, const std::vector<NamedFactor>& factors) {
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
  std::string first;
  if (s.cosine >= 1.0 - 1e-6) {
    const std::string names = matching(factors, s.scale, 1e-3, first);
    if (!names.empty()) {
      d.text = names;
      d.factor = first;
      d.exact = true;
      return d;
    }
    d.text = str_cat("scale ", format_number(std::round(s.scale * 1e6) / 1e6), ", no topology factor");
    return d;
  }
  if (s.cosine >= 0.9) {
    const std::string names = matching(factors, s.scale, 0.25, first);
    if (!names.empty()) {
      d.text = str_cat("≈ ", names, " (scale ", format_fixed(s.scale, 4), ", cosine ", format_fixed(s.cosine, 4), ")");
      d.factor = first;
      return d;
    }
  }
  d.text = str_cat("direction differs (cosine ", format_fixed(s.cosine, 6), ", scale ", format_fixed(s.scale, 4),
                   "): terms missing or extra, not a scaling");
  return d;
}

}  // namespace magic
