// One row of a magic-check report: a compared tensor pair at one level, its statistics, the
// verdict at the tolerance, and the diagnosis when it fails.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lib/compare/comparison.h"
#include "lib/compare/finite_rows.h"
#include "lib/compare/scale_diagnosis.h"

namespace magic {

// A low-precision row compares three tensors: the fp64 golden reference G, the single-process
// reference under the same precision policy R, and the distributed candidate D. It passes when
//   err(D, G) <= k · err(R, G) + floor      (D is about as accurate as the policy allows)
//   err(D, R) <= bound                      (where a bound is derived: docs/magic-check.md, "Mixed precision")
//   scale(D, R) is no topology factor       (the diagnosis names none, exactly or as ≈; where
//                                           values are judged)
// err is the worst relative error of compare_tensors.
//   for stored values (final parameters) where master and compute dtypes differ, also
//   share(D) <= share(R) + 0.5, share = the fraction of entries exactly representable in the
//   compute dtype: master weights hold values the compute dtype cannot, so a candidate whose
//   every entry fits the compute dtype stored its weights there.
struct PrecisionCriterion {
  double k = 2.0;
  double floor = 0.0;
  std::optional<double> bound;
  std::optional<c10::ScalarType> storage;  // the compute dtype, for stored values
  // False: the errors are reported but only the storage check judges (final parameters;
  // docs/magic-check.md, "Mixed precision", says why).
  bool judge_values = true;
  // Where values are not judged: the factor rule still is (a topology factor or the loss scale
  // between D and R that point the same way), for rows whose noise tilts rather than stretches.
  bool judge_factors = false;
  // Values are judged only while err(R, G) is at most this: beyond it the policy's own result
  // carries no signal to compare against (scores whose metagradient the rounding dominates).
  std::optional<double> informative_below;
  // The reference error informative_below is compared with, where it is not the row's own: a
  // per-document score sums its tokens' scores, so it carries signal only where they do.
  std::optional<double> signal_error;
  // Where judge_values is false for a reason the report should give (a passing row says it).
  std::string unjudged_because;
  // A one-number summary of a tensor (the clip coefficient) that a run below fp32 resolves only to
  // its floor: the fp32 pass judges it again wherever such a run has it (checks/run_check.cpp).
  bool judge_again_at_fp32 = false;
};

struct PrecisionErrors {
  double candidate_golden = 0.0;  // err(D, G)
  double reference_golden = 0.0;  // err(R, G)
  double reference_own = 0.0;     // err(R, G) in R's own length (the factor rule's signal test too)
  double allowed_golden = 0.0;    // k · err(R, G) + floor
  std::optional<double> bound;    // on err(D, R), which is the row's stats.worst_rel_err
  // With a storage check: the shares of D's and R's entries representable in the compute dtype.
  std::optional<double> candidate_representable, reference_representable;
  bool values_judged = true;          // false: the errors are shown, the storage check alone judged
  bool factors_judged = true;         // the factor rule applied (values judged, or judge_factors)
  bool judged_again_at_fp32 = false;  // PrecisionCriterion::judge_again_at_fp32
  // The dtype the golden tensor holds: the report's header names it ("bf16 (judged against an fp64
  // golden run)"), so that a golden run that took the policy's dtype shows.
  c10::ScalarType golden_dtype = c10::kDouble;
};

// The fraction of entries of `x` that `dtype` represents exactly.
double representable_share(const at::Tensor& x, c10::ScalarType dtype);

// A reduction row (lib/compare/reduction_row.h): the reduced gradient against the exact sum of the
// terms it added, entry by entry, in units of their summed magnitudes.
struct ReductionErrors {
  double worst = 0.0;          // max_i |g_i - c·e_i| / (c·(Σ_r|x_ri| + R·η))
  double bound = 0.0;          // γ_{R-1}(u_reduce) + 2·u_master
  int64_t terms = 0;           // R
  int64_t entries_over = 0;    // entries beyond the bound
  double typical_error = 0.0;  // median of |g_i - c·e_i| / |c·e_i| over entries with e_i != 0
};

struct CheckRow {
  std::string level;   // grad | query_grad | hvp | final_params | scores
  std::string tensor;  // the parameter, "theta_0", "per_token", ...
  // The compute dtype of the pass this row comes from where it is not the check's own: "fp32" for
  // the fp32 pass of a bf16 or fp16 check (checks/run_check.h); "" for the check's own rows.
  std::string pass;
  ComparisonStats stats;
  double tolerance = 0.0;
  bool passed = true;
  Diagnosis diagnosis;
  std::optional<PrecisionErrors> precision;  // low-precision rows only
  std::optional<ReductionErrors> reduction;  // reduction rows only
  // The one-process reference (same dtype) is itself not finite: the row fails, but the run diverges
  // or overflows on one process too, which says nothing of the distributed code.
  bool reference_not_finite = false;
};

// The row's tensor as reports name it: a row of the fp32 pass says so ("w[vjp] (fp32)").
std::string row_label(const CheckRow& row);

// Whether a row's verdict says anything: false for a low-precision row whose values were not
// judged and that had no storage check (its pass is "nothing to compare against").
bool row_judged(const CheckRow& row);

// Whether a low-precision row's values go unjudged, or judged so loosely that a factor of 2 would
// pass: not judged by value, or with no bound on err(D, R) and an allowed err(D, G) of 0.5 or more
// (R's own error against fp64 swamps the row: replay w[vjp] in bf16 where R is 57% off fp64).
bool row_weakly_judged(const CheckRow& row);

// Passes when worst_rel_err <= tolerance (error_scale: see compare_tensors). Every row fails
// when one of its tensors is not finite, saying which and where (finite_rows.h; `step_shape`
// names the step of a row that concatenates steps).
CheckRow make_check_row(const std::string& level, const std::string& tensor, const at::Tensor& distributed,
                        const at::Tensor& reference, double tolerance, const std::vector<NamedFactor>& factors,
                        double error_scale = 0.0, const StepShape& step_shape = {});

// The three-tensor row above: stats and diagnosis are D against R; `direction_noise` is how far
// from 1 the cosine of a pure scaling may fall under the policy's rounding (scale_diagnosis.h).
CheckRow make_precision_row(const std::string& level, const std::string& tensor, const at::Tensor& candidate,
                            const at::Tensor& reference, const at::Tensor& golden, const PrecisionCriterion& criterion,
                            const std::vector<NamedFactor>& factors, double error_scale, double direction_noise,
                            const StepShape& step_shape = {});

// Fails `row` when one of the named tensors is not finite, its diagnosis saying which and where
// (non_finite_diagnosis); true then. Whatever its statistics say: NaN compares false with every
// bound, so a row that is not judged by value would even pass.
bool fail_if_not_finite(CheckRow& row, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                        const StepShape& step_shape);

// A failing row for a tensor that could not be compared (missing on one side, or of another
// shape); its statistics are NaN (null in JSON, "-" in the table) and `why` is its diagnosis.
CheckRow make_unmatched_row(const std::string& level, const std::string& tensor, double tolerance,
                            const std::string& why);

}  // namespace magic
