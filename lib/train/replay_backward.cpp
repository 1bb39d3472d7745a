#include "lib/train/replay_backward.h"

#include <torch/csrc/autograd/autograd.h>

#include <optional>
#include <stdexcept>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/trace/trace_sink.h"
#include "lib/train/replay_pipeline.h"
#include "lib/train/segment_walker.h"

namespace magic {
namespace {

// REPLAY's records (lib/trace): its cotangent λ_t per parameter and the step's contribution to
// the scores, dQ/dw through step t; and ∂Q/∂θ_N it starts from.
void trace_replay_step(int64_t t, const StepVjp& vjp, const TraceLayout& layout) {
  trace_parameter_tree(vjp.cotangent.params, {"", "cotangent", "replay", "metagradient", t, "", {}}, layout);
  trace_point(vjp.dw,
              [&] { return TraceRecord{"scores", "score", "replay", "metagradient", t, "", layout.weight_gradient}; });
}

// Pairs each floating output of `next` with its cotangent; outputs that carry no graph (their
// value does not depend on the inputs) contribute nothing and are skipped.
void collect_outputs(const TensorTree& outputs, const TensorTree& cotangents, std::vector<at::Tensor>& out,
                     std::vector<at::Tensor>& grads) {
  for (const auto& e : cotangents) {
    const at::Tensor& y = outputs.at(e.name);
    if (!y.requires_grad()) continue;
    out.push_back(y);
    grads.push_back(e.tensor);
  }
}

// The next entries of `grads` as a tree of `shape`'s floating entries (the VJP's inputs order).
TensorTree take(const TensorTree& shape, const std::vector<at::Tensor>& grads, size_t& index) {
  const TensorTree floating = shape.floating();
  TensorTree out = with_values(floating, grads, index).detach();
  index += floating.size();
  return out;
}

}  // namespace

TracedStep trace_step(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w) {
  TracedStep traced;
  traced.t = t;
  traced.leaves = leaf_state(state);
  traced.w_leaf = w.detach().requires_grad_(true);
  traced.out = step.step(traced.leaves, t, traced.w_leaf, /*traced=*/true);
  return traced;
}

StepVjp backward_through(const StepFunction& step, TracedStep traced, const TrainState& cotangent_next) {
  const TrainState& s = traced.leaves;
  const StepOutput& out = traced.out;
  std::vector<at::Tensor> outputs, grad_outputs;
  collect_outputs(out.next.params, cotangent_next.params, outputs, grad_outputs);
  collect_outputs(out.next.opt, cotangent_next.opt, outputs, grad_outputs);
  collect_outputs(out.next.persistent, cotangent_next.persistent, outputs, grad_outputs);
  std::vector<at::Tensor> inputs = floating_leaves(s);
  inputs.push_back(traced.w_leaf);

  // ×S before, ÷S after: exact for a power of two S (lib/core/precision_policy.h).
  const double S = step.cotangent_scale();
  if (S != 1.0) {
    for (auto& g : grad_outputs) g = g * S;
  }
  auto grads = torch::autograd::grad(outputs, inputs, grad_outputs, /*retain_graph=*/false,
                                     /*create_graph=*/false, /*allow_unused=*/true);
  if (S != 1.0) {
    for (auto& g : grads) {
      if (g.defined()) g = g / S;
    }
  }
  StepVjp result;
  size_t index = 0;
  result.cotangent.params = take(s.params, grads, index);
  result.cotangent.opt = take(s.opt, grads, index);
  result.cotangent.persistent = take(s.persistent, grads, index);
  result.dw = grads[index].defined() ? grads[index].detach() : at::zeros_like(traced.w_leaf);
  result.state = detach_state(s);
  return result;
}

StepVjp step_vjp(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w,
                 const TrainState& cotangent_next) {
  return backward_through(step, trace_step(step, state, t, w), cotangent_next);
}

ReplayBackward::ReplayBackward(const StepFunction& step, const CheckpointStore& store, at::Tensor w,
                               ReplayObserver observer, ReplayMode mode)
    : step_(step), store_(store), w_(w.detach()), observer_(std::move(observer)), mode_(mode) {
  if (mode_ == ReplayMode::kPipelined && step_.runs_collectives()) {
    throw std::invalid_argument(
        "pipelined REPLAY needs a step that runs no collectives (its steps run on a second thread); use "
        "ReplayMode::kSequential");
  }
}

ReplayResult ReplayBackward::run(const TensorTree& dq_dparams, const ReplayResume* from,
                                 const SegmentObserver& on_segment) const {
  const int64_t n = step_.num_steps();
  const std::vector<int64_t>& checkpoints = store_.steps();
  const int64_t segments = static_cast<int64_t>(checkpoints.size());
  const int64_t first = segments - 1 - (from ? from->segments_done : 0);
  ReplayResult result;
  result.dw = from ? from->dw.clone() : at::zeros_like(w_);

  std::optional<TrainState> lambda;  // λ_{t+1}; starts as (∂Q/∂θ_N, 0, 0)
  if (from && from->segments_done > 0) lambda = from->lambda;
  dist::PhaseScope phase("REPLAY");
  // Sequential: recompute only when nothing is ready to trace, so one segment is held.
  std::optional<SegmentWalker> walker;
  std::optional<ReplayPipeline> pipeline;
  if (mode_ == ReplayMode::kPipelined) {
    pipeline.emplace(SegmentWalker(step_, store_, w_, first));
  } else {
    walker.emplace(step_, store_, w_, first);
  }
  const auto next_traced = [&]() -> TracedStep {
    if (pipeline) return pipeline->next();
    while (!walker->can_trace()) {
      walker->recompute_one();
      result.observed_states_held = std::max(result.observed_states_held, walker->states_held());
    }
    TracedStep traced = walker->trace();
    result.observed_states_held = std::max(result.observed_states_held, walker->states_held() + 1);
    return traced;
  };
  for (int64_t k = first; k >= 0; --k) {
    const int64_t begin = checkpoints[k];
    const int64_t end = k + 1 < segments ? checkpoints[k + 1] : n;
    for (int64_t t = end - 1; t >= begin; --t) {
      TracedStep traced = next_traced();
      if (traced.t != t) throw std::logic_error(str_cat("REPLAY: step ", traced.t, " came where ", t, " was due"));
      dist::set_phase(str_cat("REPLAY step ", t));
      if (!lambda) lambda = step_.replay_start(traced.leaves, dq_dparams);
      StepVjp vjp = backward_through(step_, std::move(traced), *lambda);
      if (observer_) observer_(t, vjp);
      if (tracing()) trace_replay_step(t, vjp, step_.trace_layout());
      lambda = std::move(vjp.cotangent);
      result.dw += vjp.dw;
    }
    if (on_segment) on_segment(segments - k, *lambda, result.dw);
  }
  result.initial_cotangent = *lambda;
  if (pipeline) {
    result.observed_states_held = pipeline->observed_states_held();
    result.peak_states_held = store_.count() + segment_states_held(checkpoints, n, mode_);
  } else {
    result.peak_states_held = result.observed_states_held;
  }
  return result;
}

}  // namespace magic
