// REPLAY: backpropagation through training, one step at a time (DESIGN.md section 3).
//   λθ = ∂Q/∂θ_N, λo = 0, λp = 0, λw = 0
//   for t = N-1 .. 0:  (λ_t, δw) = VJP of s_{t+1} = step(s_t, batch_t, w) against λ_{t+1};  λw += δw
// States are restored segment by segment: for the segment between two checkpoints, the states
// are recomputed forward (untraced) once and held, then consumed backwards. Memory is the
// checkpoints plus one segment; recomputation is about one extra forward pass.
#pragma once

#include <functional>

#include "lib/train/checkpoint_store.h"
#include "lib/train/step_function.h"

namespace magic {

struct StepVjp {
  TrainState cotangent;  // λ_t for the floating entries of s_t
  at::Tensor dw;         // this step's contribution to dQ/dw
};

// One vector-Jacobian product of step t at s_t against λ_{t+1}.
StepVjp step_vjp(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w,
                 const TrainState& cotangent_next);

using ReplayObserver = std::function<void(int64_t step, const StepVjp& vjp)>;

// Where an interrupted REPLAY continues: after `segments_done` segments (the latest first), with
// λ at the start of the last one done and the dQ/dw accumulated so far (replay_journal.h).
struct ReplayResume {
  int64_t segments_done = 0;
  TrainState lambda;
  at::Tensor dw;
};

// Sees REPLAY after each segment: how many are done, λ at that segment's first step, dQ/dw so far.
using SegmentObserver = std::function<void(int64_t segments_done, const TrainState& lambda, const at::Tensor& dw)>;

struct ReplayResult {
  at::Tensor dw;                 // dQ/dw: the scores
  TrainState initial_cotangent;  // dQ/ds_0
  int64_t peak_states_held = 0;  // checkpoints plus the largest segment buffer
};

class ReplayBackward {
 public:
  // `observer` sees every step's product as it is taken (progress, the non-finite guard).
  ReplayBackward(const StepFunction& step, const CheckpointStore& store, at::Tensor w, ReplayObserver observer = {});

  // `dq_dparams`: ∂Q/∂θ_N. The store must hold checkpoint 0 (every schedule does). One segment
  // per checkpoint; `from` skips the segments an earlier process finished.
  ReplayResult run(const TensorTree& dq_dparams, const ReplayResume* from = nullptr,
                   const SegmentObserver& on_segment = {}) const;

 private:
  const StepFunction& step_;
  const CheckpointStore& store_;
  at::Tensor w_;
  ReplayObserver observer_;
};

}  // namespace magic
