// The causal-LM workload of magic-check (mesh layouts), run twice on the same data, init and
// order: the distributed MAGIC pipeline (data parallelism, the topology's micro-batches, REPLAY) on
// every rank, and the single-process full-batch reference (reference/unrolled_lm) on one.
//   grad/<param>      the reduced gradient (before clipping) of every step at the reference's
//                     state of that step, concatenated
//   optimizer/clip_coefficient            c_t of every step (where the run clips)
//   optimizer/<param>[input]              c_t·g_t as the optimizer received it, every step
//   optimizer/<param>[update]             θ_{t+1} − θ_t of one step from the reference's (θ_t, o_t)
//   query_grad/<param> ∂Q/∂θ_N;   hvp/theta_0, hvp/theta_N   ∇²L v at θ_0 (batch 0), θ_N (batch N-1)
//   replay/states     REPLAY's states against training's, bit for bit (replay_states.h)
//   replay/<param>[vjp], replay/opt.<slot>[vjp], replay/w[vjp]   λθ_t, λo_t and δw_t of REPLAY's
//                     product at every step t, taken at the reference's (θ_t, o_t) against its λ_{t+1}
//   final_params/<param>; scores/per_document, scores/per_token
#pragma once

#include <vector>

#include "checks/pipeline_outputs.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/train/run_config.h"

namespace magic::checks {

// A small GPT on the KJV fixture with per-token weights, clipped at workload_clip_norm; with
// --config, that run (its clip norm, if any) at the settings' precision.
RunConfig lm_check_config(const CheckSettings& settings);
// The same before the clip norm is chosen (cheap: nothing is computed), for what does not depend
// on it: the training examples, the memory estimate.
RunConfig lm_unclipped_config(const CheckSettings& settings);

// The built-in workload's clip norm, chosen so that clipping fires on some steps and not on
// others: the gradient norms of every step's batch at θ_0 (fp64, unclipped) are sorted and the
// norm sits at the geometric middle of the widest gap (by ratio) between neighbours, as far from
// every step's norm as it can be (rounding in low precision cannot move a step across it); with
// one step, half its norm (the step clips).
double workload_clip_norm(const CheckSettings& settings);
// That choice from the step norms (any order): also the decomposition workload's.
double clip_norm_between(std::vector<double> step_norms);

// The random direction of the HVP checks: the same tree on every rank and in the reference.
TensorTree hvp_direction(const TensorTree& params, uint64_t seed);

// Every rank calls it; the outputs are replicated. The grad, optimizer and REPLAY-product rows are
// evaluated at the teacher's states (and cotangents). `mutation` names the planted variant ("" for none).
// `trace_folder`: where the ranks write the run's trace records for the first divergence
// (first_divergence.h); "" records nothing. `live`: the rank's live tracer (docs/tracer.md), which
// hears the run's trace points from where its records begin; null: none.
PipelineOutputs run_distributed_lm(const CheckSettings& settings, const dist::Runtime& runtime,
                                   const std::string& mutation, const ReferenceRun& teacher,
                                   const std::string& trace_folder = "", TraceSink* live = nullptr);
ReferenceRun run_reference_lm(const CheckSettings& settings);

// The training examples (chunks of at most max_len tokens) the lm workload draws batches from.
int64_t lm_training_examples(const CheckSettings& settings);

// Valid labels each rank of the mesh (its rows, its zig-zag columns) holds at step t, by rank.
std::vector<int64_t> shard_label_counts(const CheckSettings& settings, int64_t step);

}  // namespace magic::checks
