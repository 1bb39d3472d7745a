#include "checks/pipeline_outputs.h"

#include <algorithm>
#include <cmath>

#include "checks/mutations.h"
#include "lib/compare/comparison.h"
#include "lib/core/strings.h"

namespace magic::checks {
namespace {

// The low-precision criterion (README "Mixed precision" derives it and measures its margins):
//   floor = u·√n   the rounding difference of one evaluation summing n terms (probabilistic;
//                  n per row: NamedTensor::sum_length; final parameters: their gradients')
//   bound = 4u·√n  two runs, each within 2u·√n of the exact sum
//   k = 4          the candidate may be 4 times as far from fp64 as the policy's own reference
//                  (measured: up to 2.9 where Adam's first, sign-like step meets gradients
//                  near zero, whose signs the rounding of per-rank partial sums decides)
constexpr double kPrecisionK = 4.0;
//   k = 8 for scores: REPLAY (the candidate's algorithm: recompute each step, then its
//                  vector-Jacobian product) and the unrolled reference (one backward through
//                  every step) round differently under low precision, beyond their shared sums
//                  (measured: up to 4.6 in fp16 on the three-pool workload)
constexpr double kScoresK = 8.0;
constexpr double kInformativeScores = 0.1;
constexpr double kBoundUnits = 4.0;

std::string shape_text(const at::Tensor& t) {
  return str_cat(t.sizes());
}

const NamedTensor* find_output(const PipelineOutputs* outputs, const std::string& level, const std::string& name) {
  if (outputs == nullptr) return nullptr;
  for (const auto& o : *outputs) {
    if (o.level == level && o.name == name) return &o;
  }
  return nullptr;
}

}  // namespace

PrecisionCriterion precision_criterion(const CheckSettings& settings, const NamedTensor& row) {
  const double u_sqrt_n = unit_roundoff(settings.precision.compute) * std::sqrt(static_cast<double>(row.sum_length));
  PrecisionCriterion c;
  c.k = row.level == "scores" ? kScoresK : kPrecisionK;
  c.floor = u_sqrt_n;
  if (row.shared_inputs) c.bound = kBoundUnits * u_sqrt_n;
  // Stored values: were they kept in master weights (check_row.h)?
  if (row.stored && settings.precision.master != settings.precision.compute) c.storage = settings.precision.compute;
  // Final parameters are judged by where they are stored, not by value: under Adam an entry whose
  // gradient nearly cancels takes its ±lr step on rounding noise, and the distributed sum (of
  // per-rank partials) rounds such entries differently from one process (measured in correct
  // runs: 15% of max|w| apart in bf16; in fp16 9x the reference's own error). Their effect on
  // the query shows in the rows at θ_N and the scores.
  c.judge_values = !row.stored;
  // Scores: the metagradient through Adam's update has terms lr·eps/(|g| + eps)² that rounding
  // noise in near-zero gradients dominates; where the policy's own scores are more than 10% off
  // fp64 (measured: 100% in bf16 at Adam's first step) they carry no signal to judge D by.
  if (row.level == "scores") c.informative_below = kInformativeScores;
  return c;
}

std::vector<CheckRow> compare_outputs(const PipelineOutputs& distributed, const PipelineOutputs& reference,
                                      const CheckSettings& settings, const PipelineOutputs* golden) {
  const double tolerance = golden ? 0.0 : default_tolerance(settings.precision.compute);
  const auto factors = candidate_factors(factor_sizes(settings.topology, settings.precision));
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
    if (golden) {
      const NamedTensor* g = find_output(golden, r.level, r.name);
      if (g == nullptr || g->value.sizes() != r.value.sizes()) {
        rows.push_back(make_unmatched_row(r.level, r.name, tolerance, "the fp64 golden run has no such tensor"));
        continue;
      }
      const PrecisionCriterion criterion = precision_criterion(settings, r);
      // A pure scaling under rounding noise e tilts the cosine by about e²: allow the floor's.
      const double noise = std::max(1e-6, criterion.floor * criterion.floor);
      rows.push_back(make_precision_row(r.level, r.name, d, r.value, g->value, criterion, factors,
                                        std::max(r.error_scale, g->error_scale), noise));
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
