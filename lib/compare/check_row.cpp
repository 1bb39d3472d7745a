#include "lib/compare/check_row.h"

namespace magic {

CheckRow make_check_row(const std::string& level, const std::string& tensor, const at::Tensor& distributed,
                        const at::Tensor& reference, double tolerance, const std::vector<NamedFactor>& factors) {
  CheckRow row;
  row.level = level;
  row.tensor = tensor;
  row.stats = compare_tensors(distributed, reference);
  row.tolerance = tolerance;
  row.passed = row.stats.worst_rel_err <= tolerance;
  row.diagnosis = diagnose(row.stats, row.passed, factors);
  return row;
}

}  // namespace magic
