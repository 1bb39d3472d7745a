// Helpers shared by the multi-rank property tests: run a check with ranks as threads, say which
// rows failed, and whether every rank holds the same number of valid labels at every step.
#pragma once

#include <algorithm>
#include <functional>
#include <string>

#include "checks/lm_pipelines.h"
#include "checks/run_check.h"
#include "tests/support.h"

namespace magic::testing {

inline CheckReport run_threads(const checks::CheckSettings& settings) {
  checks::CheckRequest request;
  request.settings = settings;
  return run_check_in_threads(request);
}

// One line per failing row: "grad/tok_emb: x dp (scale 2.000000)".
inline std::string failures(const CheckReport& report) {
  std::string out;
  for (const auto& row : report.rows) {
    if (!row.passed) out += row.level + "/" + row.tensor + ": " + row.diagnosis.text + "\n";
  }
  return out;
}

// Whether, at every step, every rank of the mesh holds the same number of valid labels (when the
// AVG convention is exact).
inline bool label_counts_equal(const checks::CheckSettings& settings) {
  for (int64_t t = 0; t < settings.steps; ++t) {
    const auto counts = checks::shard_label_counts(settings, t);
    if (std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) != counts.end()) return false;
  }
  return true;
}

}  // namespace magic::testing
