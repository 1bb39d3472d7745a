// What a pipeline run yields for comparison: tensors named by level and name, produced in the
// same order by the distributed pipeline and by the reference of a workload.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checks/check_settings.h"
#include "lib/compare/check_row.h"
#include "lib/compare/reduction_row.h"
#include "lib/step/train_state.h"
#include "lib/trace/dump_sink.h"

namespace magic::checks {

struct NamedTensor {
  std::string level;  // grad | query_grad | hvp | final_params | scores
  std::string name;
  at::Tensor value;
  double error_scale = 0.0;  // for a sum of terms: their size (compare_tensors); 0: none
  // Evaluated at the same inputs in every run (the grad level at the teacher's states, the HVP
  // at θ_0): under low precision, rounding differences do not compound over training steps, so
  // the derived bound applies (docs/magic-check.md, "Mixed precision").
  bool shared_inputs = false;
  // n: the number of terms an entry sums (gradients: the batch's label positions; scores: the
  // parameters of the inner product; final parameters: their gradients').
  int64_t sum_length = 0;
  // A stored value (final parameters): checked for being kept in the master dtype.
  bool stored = false;
  // A distributed reduced gradient checked against the exact sum of its terms, the ranks' local
  // gradients (checks/reduction_probe.h): a row of its own with no reference partner.
  std::optional<ReductionTerms> reduction = std::nullopt;
  // A row concatenating every step's tensor (grad rows): one step's shape, so that a non-finite
  // entry is named by its step (lib/compare/finite_rows.h). Empty: one tensor.
  StepShape step_shape = {};
  // Compared for equality in every precision (replay/states: checks/replay_states.h), with what
  // the distributed side says of it in `detail`.
  bool exact = false;
  std::string detail = {};
  // Judged by value below fp32 (bf16, fp16). Adam's update moves an entry whose gradient is
  // rounding noise by ±lr in either run, so the update rows are shown there but not judged.
  bool judged_below_fp32 = true;
  // Through Adam's u = lr·m̂/(√v̂ + eps) or its derivative (the optimizer's update θ_{t+1} − θ_t,
  // REPLAY's whole-step rows): an entry whose gradient is within rounding of eps moves by a
  // fraction of lr that rounding decides, in fp32 as well (correct fp32 runs: dp=2 adam seed 9460
  // max_len 8 batch 2, attn.proj.weight[update] 2.5e-5 off fp64 against an allowed 2.3e-5; dp=2
  // adam 2 steps seed 32467 max_len 16 batch 3, theta[step] 6.9e-6 against 5.9e-6). Below fp64
  // such a row is judged by value under SGD only.
  bool through_adam_eps = false;
  // Evaluated at θ_N (the query gradient, the HVP there, REPLAY's start): under Adam below fp32,
  // D and R reach θ_N by ±lr moves of the entries whose gradients are rounding noise, rounded
  // differently (pipeline_outputs.cpp, precision_criterion).
  bool at_final_params = false;
  // A scalar summary of a whole tensor (the clip coefficient c = max/||g||): the terms its one
  // number sums in the master dtype (||g||² over every parameter entry), beside the sum_length
  // terms of each entry it summarizes in the compute dtype. Its floor is its own sensitivity,
  // |δc|/c <= ||δg||/||g|| <= u_compute·√sum_length + u_master·√master_sum_length, not that of a
  // tensor of master_sum_length entries each summing as many terms. 0: not a summary.
  int64_t master_sum_length = 0;
  // Computed in fp64 from integer label counts (grad/shard_weights: shard_weights.h): judged
  // exactly in every precision, with the counts in `detail`.
  bool from_counts = false;
  // A value, not a gradient (grad/loss): no reduction probe sums its terms.
  bool not_a_gradient = false;
};
using PipelineOutputs = std::vector<NamedTensor>;

// A reference run: its outputs, and the state each training step starts from. The distributed
// gradients of the grad level are evaluated at these states (teacher forcing), so a reduction
// bug shows as a clean factor at every step instead of being blurred by a diverging trajectory.
struct ReferenceRun {
  PipelineOutputs outputs;
  std::vector<TrainState> states;  // params, and persistent state where the workload has one
  // λ_{t+1}, the cotangent REPLAY's step t takes its product against (floating entries of the
  // state), where the workload checks REPLAY's products one step at a time.
  std::vector<TrainState> cotangents;
  // μ_t, the cotangent of the clipped gradient step t's optimizer consumed (replay_products.h).
  std::vector<TensorTree> gradient_cotangents;
  // g_t, the unclipped gradient there: the clip coefficient's cotangent is μ_t·g_t.
  std::vector<TensorTree> gradients;
  // The run's trace records in its order, for the first divergence (first_divergence.h); empty
  // where the settings have none.
  std::vector<DumpSink::Entry> trace;
};

// One row per reference tensor of a wanted level, against the distributed tensor of the same
// level and name. A reference tensor with no distributed partner, a partner of another shape, and
// a distributed tensor with no reference partner are failing rows that say so.
// Under a low-precision policy `golden` holds the fp64 reference's outputs (same names) and each
// row is the three-tensor comparison of lib/compare/check_row.h; null compares at the tolerance.
std::vector<CheckRow> compare_outputs(const PipelineOutputs& distributed, const PipelineOutputs& reference,
                                      const CheckSettings& settings, const PipelineOutputs* golden = nullptr);

// The criterion of a low-precision row of `settings` (k, floor, and the bound where it applies).
PrecisionCriterion precision_criterion(const CheckSettings& settings, const NamedTensor& row);

}  // namespace magic::checks
