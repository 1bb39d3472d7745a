#include "lib/compare/check_row.h"

#include <limits>

namespace magic {

CheckRow make_check_row(const std::string& level, const std::string& tensor, const at::Tensor& distributed,
                        const at::Tensor& reference, double tolerance, const std::vector<NamedFactor>& factors,
                        double error_scale) {
  CheckRow row;
  row.level = level;
  row.tensor = tensor;
  row.stats = compare_tensors(distributed, reference, error_scale);
  row.tolerance = tolerance;
  row.passed = row.stats.worst_rel_err <= tolerance;
  row.diagnosis = diagnose(row.stats, row.passed, factors);
  return row;
}

CheckRow make_unmatched_row(const std::string& level, const std::string& tensor, double tolerance,
                            const std::string& why) {
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  CheckRow row;
  row.level = level;
  row.tensor = tensor;
  row.stats.scale = row.stats.mean_ratio = row.stats.worst_rel_err = row.stats.cosine = kNan;
  row.tolerance = tolerance;
  row.passed = false;
  row.diagnosis.text = why;
  return row;
}

}  // namespace magic
