// REPLAY: backpropagation through training, one step at a time (docs/design.md, "The mathematics").
//   λθ = ∂Q/∂θ_N, λo = 0, λp = 0, λw = 0
//   for t = N-1 .. 0:  (λ_t, δw) = VJP of s_{t+1} = step(s_t, batch_t, w) against λ_{t+1};  λw += δw
// States are restored segment by segment: for the segment between two checkpoints, the states
// are recomputed forward (untraced) once and held, then consumed backwards. Memory is the
// checkpoints plus one segment; recomputation is about one extra forward pass. Pipelined
// (replay_mode.h), a second thread recomputes and traces while this one takes the products.
#pragma once

#include <functional>
#include <vector>

#include "lib/step/step_function.h"
#include "lib/train/checkpoint_store.h"
#include "lib/train/replay_mode.h"

namespace magic {

struct StepVjp {
  TrainState cotangent;  // λ_t for the floating entries of s_t
  at::Tensor dw;         // this step's contribution to dQ/dw
  TrainState state;      // s_t, the state the product was taken at (detached)
};

// Step t at s_t run with its graph kept, ready for one product: the part of a vector-Jacobian
// product that does not need λ_{t+1} (the forward and the gradient kept for differentiation).
struct TracedStep {
  int64_t t = 0;
  TrainState leaves;  // s_t, its floating entries requiring grad
  at::Tensor w_leaf;
  StepOutput out;  // s_{t+1} with the graph to `leaves` and `w_leaf`
};
TracedStep trace_step(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w);

// The product itself: λ_t and δw from a traced step and λ_{t+1}; the graph is freed.
StepVjp backward_through(const StepFunction& step, TracedStep traced, const TrainState& cotangent_next);

// How per-query REPLAY takes a step's products.
struct QueryProducts {
  // Products in one backward pass, the cotangents stacked along a leading query dimension (vmap);
  // equal to one at a time up to the order of sums inside batched kernels.
  size_t batch = 1;
  // Trace the step again for each batch instead of keeping its graph between them: the memory of
  // a lone product, one more trace (about a training step) a batch; the same scores bit for bit.
  bool retrace = false;
};

// One product per cotangent from one traced step (per-query REPLAY): the graph is kept until the
// last (or traced again, how.retrace), so the forward and its gradient are traced once for all of
// them. A step that runs collectives takes them one at a time. Each cotangent is released once its
// product is taken.
std::vector<StepVjp> backward_through_each(const StepFunction& step, TracedStep traced,
                                           std::vector<TrainState> cotangents_next, QueryProducts how = {});

// One vector-Jacobian product of step t at s_t against λ_{t+1}: trace_step, then backward_through.
StepVjp step_vjp(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w,
                 const TrainState& cotangent_next);

using ReplayObserver = std::function<void(int64_t step, const StepVjp& vjp)>;

// Where an interrupted REPLAY continues: after `segments_done` segments (the latest first), with
// each query's λ at the start of the last segment done and its dQ/dw accumulated so far
// (replay_journal.h). segments_done equal to the segment count: REPLAY has finished.
struct ReplayResume {
  int64_t segments_done = 0;
  std::vector<TrainState> lambdas;  // one per query, in order
  std::vector<at::Tensor> dws;
};

// Sees REPLAY after each segment: the point it could be resumed from.
using SegmentObserver = std::function<void(const ReplayResume& after)>;

struct ReplayResult {
  at::Tensor dw;                 // dQ/dw: the scores
  TrainState initial_cotangent;  // dQ/ds_0
  // Checkpoints plus segment_states_held (checkpoint_schedule.h): what sequential REPLAY holds at
  // its peak, the bound of what pipelined REPLAY can hold (how close it comes depends on timing).
  int64_t peak_states_held = 0;
  int64_t observed_states_held = 0;  // the most it did hold at once, counted as it ran
};

class ReplayBackward {
 public:
  // `observer` sees every step's product as it is taken (progress, the non-finite guard), on the
  // calling thread. kPipelined needs a step that runs no collectives (StepFunction::runs_collectives).
  ReplayBackward(const StepFunction& step, const CheckpointStore& store, at::Tensor w, ReplayObserver observer = {},
                 ReplayMode mode = ReplayMode::kSequential);

  // `dq_dparams`: ∂Q/∂θ_N. The store must hold checkpoint 0 (every schedule does). One segment
  // per checkpoint; `from` skips the segments an earlier process finished.
  ReplayResult run(const TensorTree& dq_dparams, const ReplayResume* from = nullptr,
                   const SegmentObserver& on_segment = {}) const;

  // REPLAY of several queries in one pass: each step recomputed and traced once, then one product
  // per query against its own λ, taken as `how` says (backward_through_each); result k is
  // run(dq_dparams[k]). The observer sees every query's product of a step, query 0's first; only
  // query 0's are traced.
  std::vector<ReplayResult> run_each(const std::vector<TensorTree>& dq_dparams, QueryProducts how = {},
                                     const ReplayResume* from = nullptr, const SegmentObserver& on_segment = {}) const;

 private:
  const StepFunction& step_;
  const CheckpointStore& store_;
  at::Tensor w_;
  ReplayObserver observer_;
  ReplayMode mode_;
};

}  // namespace magic
