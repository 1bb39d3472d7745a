#include "checks/pipeline_outputs.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "checks/factor_context.h"
#include "checks/mutations.h"
#include "checks/reduction_probe.h"
#include "checks/replay_states.h"
#include "checks/shard_weights.h"
#include "lib/compare/comparison.h"
#include "lib/core/strings.h"

namespace magic::checks {
namespace {

// The low-precision criterion (docs/magic-check.md, "Mixed precision", derives it and measures its margins):
//   floor = u·√n   the rounding difference of one evaluation summing n terms (probabilistic;
//                  n per row: NamedTensor::sum_length; final parameters: their gradients')
//   bound = 4u·√n  two runs, each within 2u·√n of the exact sum
//   k = 4          at shared inputs (the grad level, the HVP at θ_0): the candidate may be 4 times
//                  as far from fp64 as the policy's own reference (measured: up to 2.9)
constexpr double kPrecisionK = 4.0;
//   k = 8 downstream of training (the query gradient and HVP at θ_N, the scores): D and R reach
//                  θ_N along trajectories that rounding separates. Adam's first, sign-like step
//                  moves entries whose gradient is near zero by ±lr on rounding noise, differently
//                  in D and R (measured: a bf16 query gradient 0.16 off fp64 against R's 0.011, on
//                  dp=2,cp=2 adam, 1 step, seed 36298); REPLAY (recompute a step, then its
//                  vector-Jacobian product) and the unrolled reference (one backward through every
//                  step) also round differently beyond their shared sums (up to 4.6 in fp16 on
//                  the three-pool scores). A factor there still fails by the factor rule.
constexpr double kDownstreamK = 8.0;
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

// The first distributed tensor not yet used with this level and name (distributed.size(): none).
size_t find_partner(const PipelineOutputs& distributed, const std::vector<bool>& used, const std::string& level,
                    const std::string& name) {
  for (size_t i = 0; i < distributed.size(); ++i) {
    if (!used[i] && distributed[i].level == level && distributed[i].name == name) return i;
  }
  return distributed.size();
}

// "clips at steps 0, 2 of 4": where the reference's coefficient is below 1, so that a reader sees
// both branches of the clip were compared.
std::string clip_steps(const at::Tensor& coefficients) {
  std::vector<std::string> fired;
  for (int64_t t = 0; t < coefficients.numel(); ++t) {
    if (coefficients[t].item<double>() < 1.0) fired.push_back(std::to_string(t));
  }
  if (fired.empty()) return str_cat("clips at no step of ", coefficients.numel());
  return str_cat("clips at step", fired.size() > 1 ? "s " : " ", join(fired, ", "), " of ", coefficients.numel());
}

}  // namespace

PrecisionCriterion precision_criterion(const CheckSettings& settings, const NamedTensor& row) {
  const double u_sqrt_n =
      unit_roundoff(settings.precision.compute) * std::sqrt(static_cast<double>(row.sum_length)) +
      unit_roundoff(settings.precision.master) * std::sqrt(static_cast<double>(row.master_sum_length));
  PrecisionCriterion c;
  c.k = row.shared_inputs ? kPrecisionK : kDownstreamK;
  c.floor = u_sqrt_n;
  if (row.shared_inputs) c.bound = kBoundUnits * u_sqrt_n;
  // A summary's sensitivity is its floor, which bf16 resolves only to a few per cent of a clip
  // coefficient: where a run below fp32 clips, the fp32 pass judges it again (run_check.cpp).
  c.judge_again_at_fp32 = row.master_sum_length > 0;
  // Stored values: were they kept in master weights (check_row.h)?
  if (row.stored && settings.precision.master != settings.precision.compute) c.storage = settings.precision.compute;
  // Final parameters are judged by where they are stored, not by value: under Adam an entry whose
  // gradient nearly cancels takes its ±lr step on rounding noise, and the distributed sum (of
  // per-rank partials) rounds such entries differently from one process (measured in correct
  // runs: 15% of max|w| apart in bf16; in fp16 9x the reference's own error). Their effect on
  // the query shows in the rows at θ_N and the scores.
  c.judge_values = !row.stored;
  const auto compute = settings.precision.compute;
  if (!row.judged_below_fp32 && (compute == at::kHalf || compute == at::kBFloat16)) c.judge_values = false;
  if (row.through_adam_eps && settings.optimizer != "sgd" && settings.precision.low_precision()) {
    c.judge_values = false;
    c.unjudged_because = "Adam moves an entry whose gradient is rounding noise by a fraction of lr rounding decides";
  }
  // Rows at θ_N under Adam below fp64: the entries whose first gradients are rounding noise move
  // by up to ±lr in either run, by signs the distributed sums of rank partials round differently
  // from one process, so θ_N differs there and every product at θ_N with it (correct runs,
  // dp=1,tp=2 adamw 1 step batch 1: bf16 seed 487, query_grad/blocks.0.ln2.weight 64% off fp64
  // where R is 5% off; fp32 seed 649, query_grad/tok_emb beyond 8 times R's error). Their factor
  // rule stays: a loss scale left on REPLAY's start stretches them without tilting. SGD and fp64
  // judge their values; REPLAY's products judge each step's at shared inputs.
  if (row.at_final_params && settings.optimizer != "sgd" && settings.precision.low_precision()) {
    c.judge_values = false;
    c.judge_factors = true;
    c.unjudged_because = "under Adam θ_N moved by up to ±lr on rounding noise; factors still judged";
  }
  // Scores: the metagradient through Adam's update has terms lr·eps/(|g| + eps)² that rounding
  // noise in near-zero gradients dominates; where the policy's own scores are more than 10% off
  // fp64 (measured: 100% in bf16 at Adam's first step) they carry no signal to judge D by. The
  // level decides (compare_outputs): a per-document score sums its tokens' scores, and where those
  // are 11% off fp64 a document sum 3% off is cancellation luck, while the distributed run's sums
  // of rank partials round the near-zero gradients differently (measured: 360% off, dp=2 bf16
  // adamw, 2 steps, seed 64203, max_len 8).
  if (row.level == "scores") c.informative_below = kInformativeScores;
  // Under Adam one sample of the policy's own error cannot vouch for the scores: at the first step
  // the update is lr·g/(|g| + eps), and two correct runs of one policy land 6% and 59% off fp64
  // (fp16, dp=1,cp=2, adam, 1 step, seed 20282, max_len 8, batch 3: the reference's own error
  // passed the 10% test, the distributed run's sums of cp partials did not); in fp32 they start
  // from θ_N's as well (dp=1,tp=2 adamw 1 step seed 649 batch 1: 2.4e-4 off fp64 where R is
  // 2.1e-5 off). The replay level judges the same products one step at a time with bounded shared
  // inputs. In fp32 R's length is accurate and the factor rule stays; below it R's scores at
  // Adam's first step are up to 19x off in length, and only an exact scale fails them.
  if (row.level == "scores" && settings.optimizer != "sgd" && settings.precision.low_precision()) {
    c.judge_values = false;
    c.judge_factors = compute == at::kFloat;
    c.unjudged_because = "Adam's update amplifies rounding in near-zero gradients (replay judges each step)";
  }
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
  // Under low precision, the largest err(R, G) of each level whose rows are judged only where
  // informative (the scores): a level carries signal only as far as every row of it does.
  std::map<std::string, double> level_signal;
  for (const auto& r : reference) {
    const NamedTensor* g = golden ? find_output(golden, r.level, r.name) : nullptr;
    if (g == nullptr || g->value.sizes() != r.value.sizes()) continue;
    if (!precision_criterion(settings, r).informative_below) continue;
    const double err = compare_tensors(r.value, g->value, std::max(r.error_scale, g->error_scale)).worst_rel_err;
    level_signal[r.level] = std::max(level_signal[r.level], err);
  }
  std::vector<bool> used(distributed.size(), false);
  std::vector<CheckRow> rows;
  for (const auto& r : reference) {
    if (!wanted(r.level)) continue;
    const size_t match = find_partner(distributed, used, r.level, r.name);
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
    if (r.exact) {
      rows.push_back(replay_state_row(distributed[match], r));
      continue;
    }
    if (r.from_counts) {
      rows.push_back(shard_weight_row(distributed[match], r, factors));
      continue;
    }
    if (golden) {
      const NamedTensor* g = find_output(golden, r.level, r.name);
      if (g == nullptr || g->value.sizes() != r.value.sizes()) {
        rows.push_back(make_unmatched_row(r.level, r.name, tolerance, "the fp64 golden run has no such tensor"));
        continue;
      }
      PrecisionCriterion criterion = precision_criterion(settings, r);
      if (criterion.informative_below) criterion.signal_error = level_signal.at(r.level);
      // A pure scaling under rounding noise e tilts the cosine by about e²: allow the floor's.
      const double noise = std::max(1e-6, criterion.floor * criterion.floor);
      rows.push_back(make_precision_row(r.level, r.name, d, r.value, g->value, criterion, factors,
                                        std::max(r.error_scale, g->error_scale), noise, r.step_shape));
      continue;
    }
    rows.push_back(make_check_row(r.level, r.name, d, r.value, tolerance, factors, r.error_scale, r.step_shape));
  }
  for (auto& row : rows) {
    if (row.level != "optimizer" || row.tensor != "clip_coefficient" || !row.passed) continue;
    const NamedTensor* r = find_output(&reference, row.level, row.tensor);
    if (r != nullptr) row.diagnosis.text = clip_steps(r->value);
  }
  // The reduction rows (reduction_probe.h): one per gradient of the reference, judged against the
  // exact sum of the distributed reduction's own terms; placed after the other gradient rows.
  if (golden && wanted("grad") && has_reduction_rows(settings)) {
    std::vector<CheckRow> reductions;
    for (const auto& r : reference) {
      if (r.level != "grad" || r.from_counts || r.not_a_gradient) continue;
      const std::string name = reduction_row_name(r.name);
      const size_t match = find_partner(distributed, used, "grad", name);
      if (match == distributed.size() || !distributed[match].reduction) {
        reductions.push_back(make_unmatched_row("grad", name, 0.0, "missing: no reduction probe of this gradient"));
        continue;
      }
      used[match] = true;
      const NamedTensor& d = distributed[match];
      if (d.value.sizes() != r.value.sizes() || d.reduction->exact.sizes() != d.value.sizes()) {
        reductions.push_back(
            make_unmatched_row("grad", name, 0.0,
                               str_cat("shape mismatch: reduced ", shape_text(d.value), ", its exact sum ",
                                       shape_text(d.reduction->exact), ", reference ", shape_text(r.value))));
        continue;
      }
      reductions.push_back(make_reduction_row("grad", name, d.value, *d.reduction, settings.precision.reduce,
                                              settings.precision.master, factors, d.step_shape));
    }
    auto after_grad = std::find_if(rows.begin(), rows.end(), [](const CheckRow& row) { return row.level != "grad"; });
    rows.insert(after_grad, reductions.begin(), reductions.end());
  }
  for (size_t i = 0; i < distributed.size(); ++i) {
    if (used[i] || !wanted(distributed[i].level)) continue;
    rows.push_back(make_unmatched_row(distributed[i].level, distributed[i].name, tolerance,
                                      "extra: the reference has no such tensor (or it appeared twice)"));
  }
  add_factor_context(rows, settings.topology, settings.precision);
  return rows;
}

}  // namespace magic::checks
