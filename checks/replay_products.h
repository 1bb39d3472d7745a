// REPLAY's product one step at a time (the replay level): step t's vector-Jacobian product taken
// by the function REPLAY calls, at the teacher's state s_t and against the teacher's cotangent
// λ_{t+1}, so that a bug in it shows as a clean difference at that step instead of behind many
// chaotic steps of scores. Two parts are compared:
//   the part through the batch's gradient, μ·∂g'/∂(θ, w) with μ the teacher's cotangent of the
//   clipped gradient g' (the distributed part: reductions, collectives' backward, clip, the
//   assembled δw), at shared inputs and so bounded in every precision;
//   the whole step's λ_t = λ_{t+1}·∂s_{t+1}/∂s_t as REPLAY composes it (cotangent scale, optimizer
//   state), judged against fp64 in fp32, and shown but not judged by value below: Adam's ∂u/∂g at
//   an entry whose gradient is rounding noise turns that noise into O(1) differences there.
#pragma once

#include <string>
#include <vector>

#include "checks/pipeline_outputs.h"
#include "lib/step/parallelism.h"
#include "lib/step/step_function.h"

namespace magic::checks {

// Every step's products, full-shape.
struct ReplayProducts {
  std::vector<TensorTree> through_gradient;  // μ·∂g'/∂θ
  std::vector<at::Tensor> dw;                // δw_t = μ·∂g'/∂w
  std::vector<TensorTree> params, opt;       // λθ_t, λo_t of the whole step
  // ∂c_t/∂θ where the step clips: the clip's own term of the product, (μ·g)·∂c/∂θ, is a rank-one
  // correction that the rows above show only as a few percent (below bf16's noise).
  std::vector<TensorTree> clip_gradient;
};

// Step t's products on this rank (every rank calls it: the step runs collectives), at `state`
// (this rank's shards) against `cotangent` (λ_{t+1}, shards) and `gradient_cotangent` (μ, shards);
// `gradient` (the teacher's unclipped g_t, shards) gives the clip coefficient's cotangent μ·g.
void add_replay_products(ReplayProducts& into, const StepFunction& step, const Parallelism& parallel,
                         const TrainState& state, int64_t t, const at::Tensor& w, const TrainState& cotangent,
                         const TensorTree& gradient_cotangent, const TensorTree& gradient);

// The rows (sum lengths: `batch_labels` for every product, as the HVP's: one backward of the
// batch's gradient).
void append_replay_product_outputs(PipelineOutputs& out, int64_t batch_labels, const ReplayProducts& products);

// The optimizer state `full` (full-shape slots "mu.<param>", ..., and the 0-dim count) as this
// rank stores it: each slot sharded as its parameter is; and back.
TensorTree shard_optimizer_state(const Parallelism& parallel, const TensorTree& full);
TensorTree unshard_optimizer_state(const Parallelism& parallel, const TensorTree& local);

// Every step's tree entry `name`, flattened and concatenated (a row over the steps).
at::Tensor steps_of(const std::vector<TensorTree>& trees, const std::string& name);

}  // namespace magic::checks
