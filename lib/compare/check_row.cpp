#include "lib/compare/check_row.h"

#include <cmath>
#include <limits>

#include "lib/core/dtype.h"
#include "lib/core/strings.h"

namespace magic {
namespace {

constexpr double kRepresentableSlack = 0.5;
// A row whose values are not judged still fails where D is more than this far off fp64, in units of
// fp64's own size, and this many times farther than R: correct runs below fp32 stay within 99 (the
// 500-case property's worst, bf16 token scores of Adam's first step, dp=2,fsdp=2 seed 11292; 43
// before tp joined it), while a bug by the fp16 loss scale lands near 1000 with R within 0.2.
constexpr double kGrossError = 300.0;
// The bound on err(D, R) is 4 units of u√n and assumes Σ|x_i| ≈ max|s| (no cancellation). Where R's
// own error against fp64 exceeds one unit, R shows the cancellation the bound assumes away, and
// the row is judged by the k condition alone (a bf16 --config run's layer-norm bias [vjp] rows:
// R 43-70% off fp64, D 0.71-0.87 off R against a bound of 0.70; in the built-in workload no
// bounded row comes near: err(R, G) stays below a quarter of the bound).
constexpr double kBoundUnits = 4.0;
// The factor rule needs R to carry signal against the factor it reads: R within 10% of fp64 per
// factor of 2 the scale stands from 1, err(R, G) <= 0.1·|log2 f| (x dp and 1/dp: 10%, as the
// scores' informative test; the fp16 loss scale x16: 40%, where no length noise of R reaches). An
// exact scale (scale_diagnosis.h) needs none and fails every row, judged or not.
constexpr double kFactorSignal = 0.1;

double factor_value(const std::vector<NamedFactor>& factors, const std::string& name) {
  for (const auto& f : factors) {
    if (f.name == name) return f.value;
  }
  return 1.0;
}

}  // namespace

bool fail_if_not_finite(CheckRow& row, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                        const StepShape& step_shape) {
  auto why = non_finite_diagnosis(tensors, step_shape);
  if (!why) return false;
  row.passed = false;
  row.diagnosis = Diagnosis{};
  row.diagnosis.text = std::move(*why);
  for (const auto& [name, tensor] : tensors) {
    if (name != "reference tensor" || !non_finite_text(name, tensor)) continue;
    row.reference_not_finite = true;
    row.diagnosis.text +=
        "; the one-process run is not finite either: it diverges or overflows in this precision "
        "on one process too, whatever the distribution";
  }
  return true;
}

CheckRow make_check_row(const std::string& level, const std::string& tensor, const at::Tensor& distributed,
                        const at::Tensor& reference, double tolerance, const std::vector<NamedFactor>& factors,
                        double error_scale, const StepShape& step_shape) {
  CheckRow row;
  row.level = level;
  row.tensor = tensor;
  row.stats = compare_tensors(distributed, reference, error_scale);
  row.tolerance = tolerance;
  row.passed = row.stats.worst_rel_err <= tolerance;
  row.diagnosis = diagnose(row.stats, row.passed, factors);
  fail_if_not_finite(row, {{"distributed tensor", distributed}, {"reference tensor", reference}}, step_shape);
  return row;
}

double representable_share(const at::Tensor& x, c10::ScalarType dtype) {
  if (x.numel() == 0) return 0.0;
  const at::Tensor wide = x.detach().to(at::kDouble);
  return wide.eq(wide.to(dtype).to(at::kDouble)).to(at::kDouble).mean().item<double>();
}

CheckRow make_precision_row(const std::string& level, const std::string& tensor, const at::Tensor& candidate,
                            const at::Tensor& reference, const at::Tensor& golden, const PrecisionCriterion& criterion,
                            const std::vector<NamedFactor>& factors, double error_scale, double direction_noise,
                            const StepShape& step_shape) {
  CheckRow row;
  row.level = level;
  row.tensor = tensor;
  row.stats = compare_tensors(candidate, reference, error_scale);
  PrecisionErrors e;
  const ComparisonStats d_g = compare_tensors(candidate, golden, error_scale);
  const ComparisonStats r_g = compare_tensors(reference, golden, error_scale);
  e.candidate_golden = d_g.worst_rel_err;
  e.reference_golden = r_g.worst_rel_err;
  e.allowed_golden = criterion.k * e.reference_golden + criterion.floor;
  e.bound = criterion.bound;
  e.judged_again_at_fp32 = criterion.judge_again_at_fp32;
  if (e.bound && e.reference_golden > *e.bound / kBoundUnits) e.bound.reset();
  e.golden_dtype = golden.scalar_type();
  row.tolerance = e.allowed_golden;
  bool stored_right = true;
  if (criterion.storage) {
    e.candidate_representable = representable_share(candidate, *criterion.storage);
    e.reference_representable = representable_share(reference, *criterion.storage);
    stored_right = *e.candidate_representable <= *e.reference_representable + kRepresentableSlack;
  }
  const bool values_right = e.candidate_golden <= e.allowed_golden && (!e.bound || row.stats.worst_rel_err <= *e.bound);
  const double signal = criterion.signal_error.value_or(e.reference_golden);
  const bool informative = !criterion.informative_below || signal <= *criterion.informative_below;
  e.values_judged = criterion.judge_values && informative;
  // Where values are judged, a scale that a topology factor explains fails whatever the floor
  // allows: D and R run the same policy, so when they point the same way and differ in length by a
  // size of the layout (x dp, 1/n_ci; exactly, or within 25% as ≈) that is a factor bug, not noise
  // (a factor-2 bug must fail in bf16, where the scores' floor u·√n is 0.42). Not where R carries
  // no signal: bf16 scores of Adam's first step agree in direction and differ in length by up to
  // 19x between two correct runs (the 500-case property found it). Nor where D and R are closer
  // than R is to fp64: a row near zero against its error scale has a noise ratio for a length (a
  // per-document score whose tokens cancel under the clip, dp=1,cp=2 bf16 sgd batch 1: D/R 0.55
  // at err(D,R) 2.2e-3, err(R,G) 4.9e-3). Nor where R is too far off fp64 for the factor it reads
  // (kFactorSignal): its length is noise too (a bf16 --config run's ln_f.bias[vjp], R 70% off
  // fp64, read ≈ x dp). That signal is measured in R's own length as well: a row near zero against its error scale is
  // accurate in that scale's units however noisy its length (a one-document per-document score whose tokens cancel,
  // dp=1,tp=2 fp16 adamw seed 15227 batch 1: D/R exactly 2.0 in the fp32 pass, two dyadic residues, at err(R,G) 4e-8 of
  // the tokens' scale).
  const double own_signal = error_scale > 0.0 ? compare_tensors(reference, golden).worst_rel_err : e.reference_golden;
  e.reference_own = own_signal;
  const Diagnosis read = diagnose(row.stats, /*passed=*/false, factors, direction_noise);
  const double signal_needed = kFactorSignal * std::abs(std::log2(factor_value(factors, read.factor)));
  const bool measurable = row.stats.worst_rel_err > e.reference_golden && e.reference_golden <= signal_needed &&
                          own_signal <= signal_needed;
  e.factors_judged = e.values_judged || criterion.judge_factors;
  const bool factor_scaled = e.factors_judged && measurable && !read.factors.empty();
  // An exact scale fails in every precision, whether the row's values are judged or not: rounding
  // does not stretch D against R without tilting it (the fp16 loss scale left on REPLAY's start
  // made the scores exactly x16 at cosine 0.999999 while they were not judged by value).
  const bool scaled = is_exact_scale(row.stats);
  const bool gross =
      !e.values_judged && e.candidate_golden > kGrossError && e.candidate_golden > kGrossError * e.reference_golden;
  row.passed = stored_right && !factor_scaled && !scaled && !gross && (values_right || !e.values_judged);
  row.precision = e;
  if (fail_if_not_finite(
          row, {{"distributed tensor", candidate}, {"reference tensor", reference}, {"golden tensor", golden}},
          step_shape)) {
    return row;
  }
  // `read` is diagnose's reading of a failing row; a passing row has none.
  row.diagnosis = scaled ? diagnose_exact_scale(row.stats, factors) : row.passed ? Diagnosis{} : read;
  if (scaled) {
    row.diagnosis.text =
        str_cat(e.values_judged ? "" : "not judged by value, but ", "an exact scale of the reference (",
                "ratio constant to ", format_sci(row.stats.residual, 0), " over ",
                format_fixed(row.stats.effective_entries, 0), " effective entries): ", row.diagnosis.text);
  } else if (row.passed && criterion.storage) {
    row.diagnosis.text = str_cat("master weights kept: ", format_fixed(100 * *e.candidate_representable, 0),
                                 "% of entries fit ", dtype_name(*criterion.storage), " (reference ",
                                 format_fixed(100 * *e.reference_representable, 0), "%)");
  } else if (row.passed && !criterion.judge_values && !criterion.unjudged_because.empty()) {
    row.diagnosis.text = str_cat("not judged by value: ", criterion.unjudged_because);
  } else if (row.passed && !informative) {
    row.diagnosis.text =
        str_cat("not judged by value: the policy's own ", criterion.signal_error ? "scores are " : "result is ",
                format_fixed(100 * signal, 0), "% off fp64");
  }
  if (scaled) {
    // Named above; a storage failure would be the same row's second finding.
  } else if (!stored_right) {
    row.diagnosis.text =
        str_cat(format_fixed(100 * *e.candidate_representable, 0), "% of entries fit ", dtype_name(*criterion.storage),
                " exactly (the policy's reference: ", format_fixed(100 * *e.reference_representable, 0),
                "%): stored in the compute dtype, not in master weights");
  } else if (gross) {
    row.diagnosis.text =
        str_cat("not judged by value, but ", format_sci(e.candidate_golden, 1),
                " off fp64 in units of its size, the policy's own ", format_sci(e.reference_golden, 1),
                " (correct runs stay within ", format_fixed(kGrossError, 0), "); ", row.diagnosis.text);
  } else if (!row.passed && row.diagnosis.factors.empty()) {
    // Not a scaling: say which of the two conditions failed, then what the direction shows.
    const std::string why =
        e.candidate_golden > e.allowed_golden
            ? str_cat("error vs fp64 ", format_sci(e.candidate_golden, 1), " > ", format_sci(criterion.k, 0), " x ",
                      format_sci(e.reference_golden, 1), " + ", format_sci(criterion.floor, 0), " (the policy's own)")
            : str_cat("error vs the policy's reference ", format_sci(row.stats.worst_rel_err, 1), " > bound ",
                      format_sci(*e.bound, 1));
    row.diagnosis.text = why + "; " + row.diagnosis.text;
  }
  return row;
}

bool row_judged(const CheckRow& row) {
  return !row.precision || row.precision->values_judged || row.precision->candidate_representable.has_value();
}

std::string row_label(const CheckRow& row) {
  return row.pass.empty() ? row.tensor : str_cat(row.tensor, " (", row.pass, ")");
}

bool row_weakly_judged(const CheckRow& row) {
  constexpr double kLooseAllowed = 0.5;
  if (!row.precision) return false;
  const PrecisionErrors& e = *row.precision;
  return !e.values_judged || (!e.bound && e.allowed_golden >= kLooseAllowed);
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
