#include "lib/train/replay_backward.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
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

namespace {

// The product against one cotangent; `retain` keeps the graph for another.
StepVjp product(const StepFunction& step, const TracedStep& traced, const TrainState& cotangent_next, bool retain) {
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
  auto grads = torch::autograd::grad(outputs, inputs, grad_outputs, /*retain_graph=*/retain,
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

}  // namespace

StepVjp backward_through(const StepFunction& step, TracedStep traced, const TrainState& cotangent_next) {
  return product(step, traced, cotangent_next, /*retain=*/false);
}

std::vector<StepVjp> backward_through_each(const StepFunction& step, TracedStep traced,
                                           const std::vector<TrainState>& cotangents_next) {
  std::vector<StepVjp> out;
  for (size_t k = 0; k < cotangents_next.size(); ++k) {
    out.push_back(product(step, traced, cotangents_next[k], /*retain=*/k + 1 < cotangents_next.size()));
  }
  return out;
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
  return run_streams({dq_dparams}, from, on_segment).front();
}

std::vector<ReplayResult> ReplayBackward::run_each(const std::vector<TensorTree>& dq_dparams) const {
  if (dq_dparams.empty()) throw std::invalid_argument("ReplayBackward::run_each: no query");
  return run_streams(dq_dparams, nullptr, {});
}

std::vector<ReplayResult> ReplayBackward::run_streams(const std::vector<TensorTree>& dq_dparams,
                                                      const ReplayResume* from,
                                                      const SegmentObserver& on_segment) const {
  const int64_t n = step_.num_steps();
  const std::vector<int64_t>& checkpoints = store_.steps();
  const int64_t segments = static_cast<int64_t>(checkpoints.size());
  const int64_t first = segments - 1 - (from ? from->segments_done : 0);
  const size_t queries = dq_dparams.size();
  std::vector<ReplayResult> results(queries);
  for (auto& r : results) r.dw = from ? from->dw.clone() : at::zeros_like(w_);

  // λ_{t+1} of each query; starts as (∂Q/∂θ_N, 0, 0). A resumed REPLAY is one query's.
  std::vector<TrainState> lambdas;
  if (from && from->segments_done > 0) lambdas = {from->lambda};
  dist::PhaseScope phase("REPLAY");
  // Sequential: recompute only when nothing is ready to trace, so one segment is held.
  std::optional<SegmentWalker> walker;
  std::optional<ReplayPipeline> pipeline;
  if (mode_ == ReplayMode::kPipelined) {
    pipeline.emplace(SegmentWalker(step_, store_, w_, first));
  } else {
    walker.emplace(step_, store_, w_, first);
  }
  int64_t observed_states_held = 0;
  const auto next_traced = [&]() -> TracedStep {
    if (pipeline) return pipeline->next();
    while (!walker->can_trace()) {
      walker->recompute_one();
      observed_states_held = std::max(observed_states_held, walker->states_held());
    }
    TracedStep traced = walker->trace();
    observed_states_held = std::max(observed_states_held, walker->states_held() + 1);
    return traced;
  };
  for (int64_t k = first; k >= 0; --k) {
    const int64_t begin = checkpoints[k];
    const int64_t end = k + 1 < segments ? checkpoints[k + 1] : n;
    for (int64_t t = end - 1; t >= begin; --t) {
      TracedStep traced = next_traced();
      if (traced.t != t) throw std::logic_error(str_cat("REPLAY: step ", traced.t, " came where ", t, " was due"));
      dist::set_phase(str_cat("REPLAY step ", t));
      if (lambdas.empty()) {
        for (const auto& dq : dq_dparams) lambdas.push_back(step_.replay_start(traced.leaves, dq));
      }
      std::vector<StepVjp> vjps = backward_through_each(step_, std::move(traced), lambdas);
      for (size_t q = 0; q < queries; ++q) {
        if (observer_) observer_(t, vjps[q]);
        if (q == 0 && tracing()) trace_replay_step(t, vjps[q], step_.trace_layout());
        lambdas[q] = std::move(vjps[q].cotangent);
        results[q].dw += vjps[q].dw;
      }
    }
    if (on_segment) on_segment(segments - k, lambdas.front(), results.front().dw);
  }
  const int64_t peak = pipeline ? store_.count() + segment_states_held(checkpoints, n, mode_) : observed_states_held;
  for (size_t q = 0; q < queries; ++q) {
    results[q].initial_cotangent = lambdas[q];
    results[q].observed_states_held = pipeline ? pipeline->observed_states_held() : observed_states_held;
    results[q].peak_states_held = peak;
  }
  return results;
}

}  // namespace magic
