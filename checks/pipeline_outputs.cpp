#include "checks/pipeline_outputs.h"

#include <stdexcept>

#include "lib/compare/comparison.h"
#include "lib/core/strings.h"

namespace magic::checks {

std::vector<CheckRow> compare_outputs(const PipelineOutputs& distributed, const PipelineOutputs& reference,
                                      const CheckSettings& settings) {
  const double tolerance = default_tolerance(settings.dtype);
  const auto factors = candidate_factors(settings.topology.named_sizes());
  std::vector<CheckRow> rows;
  for (const auto& d : distributed) {
    bool wanted = false;
    for (Level l : settings.levels) wanted = wanted || level_name(l) == d.level;
    if (!wanted) continue;
    const NamedTensor* r = nullptr;
    for (const auto& candidate : reference) {
      if (candidate.level == d.level && candidate.name == d.name) r = &candidate;
    }
    if (r == nullptr) throw std::logic_error(str_cat("no reference tensor for ", d.level, "/", d.name));
    rows.push_back(make_check_row(d.level, d.name, d.value, r->value, tolerance, factors));
  }
  return rows;
}

}  // namespace magic::checks
