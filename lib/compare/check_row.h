// One row of a magic-check report: a compared tensor pair at one level, its statistics, the
// verdict at the tolerance, and the diagnosis when it fails.
#pragma once

#include <string>
#include <vector>

#include "lib/compare/comparison.h"
#include "lib/compare/scale_diagnosis.h"

namespace magic {

struct CheckRow {
  std::string level;   // grad | query_grad | hvp | final_params | scores
  std::string tensor;  // the parameter, "theta_0", "per_token", ...
  ComparisonStats stats;
  double tolerance = 0.0;
  bool passed = true;
  Diagnosis diagnosis;
};

// Passes when worst_rel_err <= tolerance (error_scale: see compare_tensors).
CheckRow make_check_row(const std::string& level, const std::string& tensor, const at::Tensor& distributed,
                        const at::Tensor& reference, double tolerance, const std::vector<NamedFactor>& factors,
                        double error_scale = 0.0);

// A failing row for a tensor that could not be compared (missing on one side, or of another
// shape); its statistics are NaN (null in JSON, "-" in the table) and `why` is its diagnosis.
CheckRow make_unmatched_row(const std::string& level, const std::string& tensor, double tolerance,
                            const std::string& why);

}  // namespace magic
