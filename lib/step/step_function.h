// The two functions a MAGIC pipeline is made of, as interfaces so the single-process engine and
// the distributed one share ForwardTraining and ReplayBackward (lib/step: the distributed code
// implements them, lib/train drives them; see docs/design.md, "Layers"):
//   StepFunction:  s_{t+1} = step(s_t, batch_t, w)
//   QueryFunction: Q(θ), the query loss at the final parameters
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "lib/step/train_state.h"
#include "lib/trace/trace_layout.h"

namespace magic {

struct StepOutput {
  TrainState next;
  TensorTree grads;  // the (reduced, clipped) gradient the optimizer consumed
  // c of the clip g' = c·g (0-dim, in the master dtype); undefined where the step does not clip.
  at::Tensor clip_coefficient;
  // This rank's share of the step's training loss (0-dim, detached), for watching the run
  // (training_health.h); undefined where a step does not report it. Never differentiated.
  at::Tensor loss{};
};

class StepFunction {
 public:
  virtual ~StepFunction() = default;
  virtual int64_t num_steps() const = 0;
  // traced = true: the floating leaves of s must require grad; the result keeps the graph to
  // them and to w (create_graph), ready for one vector-Jacobian product. traced = false: a
  // plain training step, result detached.
  virtual StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const = 0;
  // REPLAY's dQ/dw on this rank -> the full dQ/dw (data-parallel steps sum across ranks).
  virtual at::Tensor assemble_weight_gradient(const at::Tensor& local) const { return local; }
  // How this rank's traced tensors make up the whole (lib/trace): REPLAY's records are placed by it.
  virtual TraceLayout trace_layout() const { return {}; }
  // The reduced (unclipped) gradient of step t's training loss with respect to state.params,
  // which must require grad, at the state's persistent values; with create_graph it can be
  // differentiated again.
  virtual TensorTree gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const = 0;
  // REPLAY multiplies each step's cotangents by this before the vector-Jacobian product and
  // divides what it yields: the loss scale, so that the low-precision parts of the backward of
  // the backward see cotangents of the size the training backward saw (fp16 would flush them).
  virtual double cotangent_scale() const { return 1.0; }
  // Whether step() and gradient() talk to other ranks. Pipelined REPLAY (replay_mode.h) runs
  // steps on a second thread, so only a step that says it does not may be pipelined.
  virtual bool runs_collectives() const { return true; }
  // A checkpoint's state as training and REPLAY continue from it: by default exactly as saved.
  // magic-check plants restore bugs here (a wrapper StepFunction); REPLAY's recomputed states
  // must equal training's bit for bit.
  virtual TrainState restore(const TrainState& saved, int64_t /*step*/) const { return saved; }
  // λ_N, the cotangent REPLAY starts from: (∂Q/∂θ_N, 0, 0) over the floating entries of a state
  // shaped like `state`, with ∂Q/∂θ_N as the query gave it (unscaled: REPLAY scales each product's
  // cotangents itself, cotangent_scale). magic-check compares it (`replay <param>[start]`) and
  // plants start bugs here (a wrapper StepFunction).
  virtual TrainState replay_start(const TrainState& state, const TensorTree& query_gradient) const;
};

class QueryFunction {
 public:
  virtual ~QueryFunction() = default;
  virtual int64_t num_queries() const = 0;
  // The mean query loss, or query `index`'s loss alone.
  virtual at::Tensor loss(const TensorTree& params, std::optional<int64_t> index = std::nullopt) const = 0;
  // ∂Q/∂θ at `params` (detached); by default autograd on loss().
  virtual TensorTree gradient(const TensorTree& params, std::optional<int64_t> index = std::nullopt) const;
};

}  // namespace magic
