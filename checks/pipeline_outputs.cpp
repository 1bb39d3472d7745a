#include "checks/pipeline_outputs.h"

#include "lib/compare/comparison.h"
#include "lib/core/strings.h"

namespace magic::checks {
namespace {

std::string shape_text(const at::Tensor& t) {
  return str_cat(t.sizes());
}

}  // namespace

std::vector<CheckRow> compare_outputs(const PipelineOutputs& distributed, const PipelineOutputs& reference,
                                      const CheckSettings& settings) {
  const double tolerance = default_tolerance(settings.dtype);
  const auto factors = candidate_factors(settings.topology.named_sizes());
  auto wanted = [&](const std::string& level) {
    for (Level l : settings.levels) {
      if (level_name(l) == level) return true;
    }
    return false;
  };
  // The reference decides what must be compared: every one of its tensors of a wanted level
  // meets exactly one distributed tensor of the same level, name and shape, or fails its row.
  std::vector<bool> used(distributed.size(), false);
  std::vector<CheckRow> rows;
  for (const auto& r : reference) {
    if (!wanted(r.level)) continue;
    size_t match = distributed.size();
    for (size_t i = 0; i < distributed.size() && match == distributed.size(); ++i) {
      if (!used[i] && distributed[i].level == r.level && distributed[i].name == r.name) match = i;
    }
    if (match == distributed.size()) {
      rows.push_back(
          make_unmatched_row(r.level, r.name, tolerance, "missing: the distributed pipeline produced no such tensor"));
      continue;
    }
    used[match] = true;
    const at::Tensor& d = distributed[match].value;
    if (d.sizes() != r.value.sizes()) {
      rows.push_back(make_unmatched_row(
          r.level, r.name, tolerance,
          str_cat("shape mismatch: distributed ", shape_text(d), ", reference ", shape_text(r.value))));
      continue;
    }
    rows.push_back(make_check_row(r.level, r.name, d, r.value, tolerance, factors, r.error_scale));
  }
  for (size_t i = 0; i < distributed.size(); ++i) {
    if (used[i] || !wanted(distributed[i].level)) continue;
    rows.push_back(make_unmatched_row(distributed[i].level, distributed[i].name, tolerance,
                                      "extra: the reference has no such tensor (or it appeared twice)"));
  }
  return rows;
}

}  // namespace magic::checks
