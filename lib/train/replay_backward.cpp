#include "lib/train/replay_backward.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"

namespace magic {
namespace {

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

StepVjp step_vjp(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w,
                 const TrainState& cotangent_next) {
  TrainState s = leaf_state(state);
  at::Tensor w_leaf = w.detach().requires_grad_(true);
  StepOutput out = step.step(s, t, w_leaf, /*traced=*/true);

  std::vector<at::Tensor> outputs, grad_outputs;
  collect_outputs(out.next.params, cotangent_next.params, outputs, grad_outputs);
  collect_outputs(out.next.opt, cotangent_next.opt, outputs, grad_outputs);
  collect_outputs(out.next.persistent, cotangent_next.persistent, outputs, grad_outputs);
  std::vector<at::Tensor> inputs = floating_leaves(s);
  inputs.push_back(w_leaf);

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
  result.dw = grads[index].defined() ? grads[index].detach() : at::zeros_like(w);
  return result;
}

ReplayBackward::ReplayBackward(const StepFunction& step, const CheckpointStore& store, at::Tensor w,
                               ReplayObserver observer)
    : step_(step), store_(store), w_(w.detach()), observer_(std::move(observer)) {}

ReplayResult ReplayBackward::run(const TensorTree& dq_dparams, const ReplayResume* from,
                                 const SegmentObserver& on_segment) const {
  const int64_t n = step_.num_steps();
  const std::vector<int64_t>& checkpoints = store_.steps();
  const int64_t segments = static_cast<int64_t>(checkpoints.size());
  ReplayResult result;
  result.dw = from ? from->dw.clone() : at::zeros_like(w_);

  std::optional<TrainState> lambda;  // λ_{t+1}; starts as (∂Q/∂θ_N, 0, 0)
  if (from && from->segments_done > 0) lambda = from->lambda;
  dist::PhaseScope phase("REPLAY");
  for (int64_t k = segments - 1 - (from ? from->segments_done : 0); k >= 0; --k) {
    const int64_t begin = checkpoints[k];
    const int64_t end = k + 1 < segments ? checkpoints[k + 1] : n;
    if (end - begin > 1) dist::set_phase(str_cat("REPLAY: recomputing from the checkpoint before step ", begin));
    // Recompute s_begin .. s_{end-1} once, untraced.
    std::vector<TrainState> segment{store_.load(begin)};
    for (int64_t t = begin; t + 1 < end; ++t) segment.push_back(step_.step(segment.back(), t, w_, false).next);
    result.peak_states_held = std::max(result.peak_states_held, store_.count() + static_cast<int64_t>(segment.size()));
    if (!lambda) {
      lambda = zero_cotangent(segment.back());
      lambda->params = dq_dparams.detach();
    }
    for (int64_t t = end - 1; t >= begin; --t) {
      dist::set_phase(str_cat("REPLAY step ", t));
      StepVjp vjp = step_vjp(step_, segment.back(), t, w_, *lambda);
      if (observer_) observer_(t, vjp);
      segment.pop_back();
      lambda = std::move(vjp.cotangent);
      result.dw += vjp.dw;
    }
    if (on_segment) on_segment(segments - k, *lambda, result.dw);
  }
  result.initial_cotangent = *lambda;
  return result;
}

}  // namespace magic
