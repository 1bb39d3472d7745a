// The linear datamodeling score (LDS) of a MAGIC attribution, as the MAGIC paper measures it:
// draw S random subsets of the training examples (each a fraction f of them), retrain with those
// examples' weights set to 0, and correlate the query loss change each retraining shows with the
// change the scores predict. With scores τ = dQ/dw at w = 1, the first-order prediction for
// dropping subset D is
//   predicted_D = Q(w_D) - Q(1) ≈ τ·(w_D - 1) = -Σ_{i∈D} τ_i      (so LDS > 0 means "right way")
//   LDS = Spearman over the S subsets of (actual_D, predicted_D)
// per query (with per-query scores) and for the query set's mean loss; the interval is a
// percentile bootstrap over subsets (the same resampled subsets for every query).
// Retraining uses the run's own StepFunction, so a distributed run retrains distributed.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "lib/train/run_config.h"

namespace magic {

struct LdsOptions {
  int64_t subsets = 32;
  double drop_fraction = 0.1;
  int64_t bootstrap = 1000;  // resamples of the subsets for the interval
  double level = 0.95;       // the interval's coverage
  uint64_t seed = 0;         // the run's seed: subsets and resamples derive from it
  std::ostream* progress = nullptr;
  bool terminal = false;
};

struct LdsEstimate {
  double value = 0, low = 0, high = 0;
};

struct LdsResult {
  // Column 0 is the query set's mean loss; with per-query scores columns 1..Q are the queries.
  std::vector<std::string> columns;
  at::Tensor actual, predicted;  // [S, columns] fp64
  std::vector<LdsEstimate> per_column;
  LdsEstimate mean;  // per-query runs: the mean over queries of their LDS; else column 0's
  double seconds = 0;
};

// How many times validate_lds trains: once per subset and once with every weight.
inline int64_t lds_retrainings(const LdsOptions& options) {
  return options.subsets + 1;
}

// Throws InputError for subsets < 2 or a fraction that drops no example or all of them.
void validate_lds_options(const LdsOptions& options, const std::string& subsets_flag, const std::string& fraction_flag);

// How many examples each subset drops; InputError when that is none or all of them.
int64_t lds_dropped_count(const LdsOptions& options, int64_t examples);

// `scores`: run_magic's scores for `problem` ([N] / [N, T], or [Q, ...] when per_query). The
// baseline Q(θ(1)) is retrained here too, with the subsets' own step function.
LdsResult validate_lds(const LmProblem& problem, const at::Tensor& scores, bool per_query, const LdsOptions& options);

// The statistic alone (pure): Spearman per column of actual vs predicted, a percentile bootstrap
// interval over rows, and the mean over columns `mean_from`..end.
void estimate_lds(LdsResult& result, const LdsOptions& options, int64_t mean_from);

}  // namespace magic
