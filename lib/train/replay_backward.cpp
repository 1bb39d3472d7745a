#include "lib/train/replay_backward.h"

#include <ATen/VmapMode.h>
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

// λ_{t+1}'s floating entries paired with the outputs of `out` that carry a graph, in the VJP's order.
void collect_all(const StepOutput& out, const TrainState& cotangent_next, std::vector<at::Tensor>& outputs,
                 std::vector<at::Tensor>& grads) {
  collect_outputs(out.next.params, cotangent_next.params, outputs, grads);
  collect_outputs(out.next.opt, cotangent_next.opt, outputs, grads);
  collect_outputs(out.next.persistent, cotangent_next.persistent, outputs, grads);
}

// grads (in the VJP's inputs order: s_t's floating entries, then w) as a StepVjp.
StepVjp vjp_from(const TracedStep& traced, const std::vector<at::Tensor>& grads) {
  const TrainState& s = traced.leaves;
  StepVjp result;
  size_t index = 0;
  result.cotangent.params = take(s.params, grads, index);
  result.cotangent.opt = take(s.opt, grads, index);
  result.cotangent.persistent = take(s.persistent, grads, index);
  result.dw = grads[index].defined() ? grads[index].detach() : at::zeros_like(traced.w_leaf);
  result.state = detach_state(s);
  return result;
}

std::vector<at::Tensor> vjp_inputs(const TracedStep& traced) {
  std::vector<at::Tensor> inputs = floating_leaves(traced.leaves);
  inputs.push_back(traced.w_leaf);
  return inputs;
}

// ∂(outputs)/∂(inputs)ᵀ · grad_outputs, scaled ×S before and ÷S after: exact for a power of two S
// (lib/core/precision_policy.h). `retain` keeps the graph for another product.
std::vector<at::Tensor> scaled_grad(const StepFunction& step, const std::vector<at::Tensor>& outputs,
                                    std::vector<at::Tensor> grad_outputs, const std::vector<at::Tensor>& inputs,
                                    bool retain) {
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
  return grads;
}

// The product against one cotangent.
StepVjp product(const StepFunction& step, const TracedStep& traced, const TrainState& cotangent_next, bool retain) {
  std::vector<at::Tensor> outputs, grad_outputs;
  collect_all(traced.out, cotangent_next, outputs, grad_outputs);
  return vjp_from(traced, scaled_grad(step, outputs, std::move(grad_outputs), vjp_inputs(traced), retain));
}

// Vmap's batched-tensor mode for one scope: tensors given a batch dimension at `level` carry it
// through every operator, so one backward pass takes K products (the query dimension).
class VmapLevel {
 public:
  VmapLevel() : level_(at::impl::VmapMode::increment_nesting()) {}
  ~VmapLevel() { at::impl::VmapMode::decrement_nesting(); }
  VmapLevel(const VmapLevel&) = delete;
  VmapLevel& operator=(const VmapLevel&) = delete;
  int64_t level() const { return level_; }

 private:
  int64_t level_;
};

// K products in one backward pass: λ_{t+1} of each query stacked along a leading dimension,
// batched (vmap), the graph walked once; product k equals product(cotangents[k]) up to the order
// of floating-point sums inside batched kernels.
std::vector<StepVjp> batched_products(const StepFunction& step, const TracedStep& traced,
                                      const std::vector<TrainState>& cotangents, size_t first, size_t count,
                                      bool retain) {
  std::vector<at::Tensor> outputs;
  std::vector<std::vector<at::Tensor>> per_query(count);
  for (size_t k = 0; k < count; ++k) {
    std::vector<at::Tensor> these_outputs;
    collect_all(traced.out, cotangents[first + k], these_outputs, per_query[k]);
    if (k == 0) outputs = std::move(these_outputs);
  }
  const auto K = static_cast<int64_t>(count);
  std::vector<std::vector<at::Tensor>> grads_of(count);
  {
    VmapLevel vmap;
    std::vector<at::Tensor> batched;
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::vector<at::Tensor> column;
      for (size_t k = 0; k < count; ++k) column.push_back(per_query[k][i]);
      batched.push_back(at::_add_batch_dim(at::stack(column), 0, vmap.level()));
    }
    const std::vector<at::Tensor> inputs = vjp_inputs(traced);
    std::vector<at::Tensor> grads = scaled_grad(step, outputs, std::move(batched), inputs, retain);
    for (size_t i = 0; i < grads.size(); ++i) {
      // An input the products do not reach stays undefined (vjp_from gives it zeros).
      const at::Tensor stacked =
          grads[i].defined() ? at::_remove_batch_dim(grads[i], vmap.level(), K, 0) : at::Tensor();
      for (size_t k = 0; k < count; ++k) grads_of[k].push_back(stacked.defined() ? stacked[k] : at::Tensor());
    }
  }
  std::vector<StepVjp> out;
  for (size_t k = 0; k < count; ++k) out.push_back(vjp_from(traced, grads_of[k]));
  return out;
}

}  // namespace

StepVjp backward_through(const StepFunction& step, TracedStep traced, const TrainState& cotangent_next) {
  return product(step, traced, cotangent_next, /*retain=*/false);
}

std::vector<StepVjp> backward_through_each(const StepFunction& step, TracedStep traced,
                                           std::vector<TrainState> cotangents_next, QueryProducts how) {
  std::vector<StepVjp> out;
  const size_t n = cotangents_next.size();
  // A step whose backward runs collectives takes its products one at a time: a batched tensor
  // cannot cross a process group.
  const size_t batch = step.runs_collectives() ? 1 : std::max<size_t>(how.batch, 1);
  for (size_t first = 0; first < n; first += batch) {
    const size_t count = std::min(batch, n - first);
    // Traced steps write no trace records (LmStep::step), so tracing one again adds none.
    if (first > 0 && how.retrace)
      traced = trace_step(step, detach_state(traced.leaves), traced.t, traced.w_leaf.detach());
    const bool retain = !how.retrace && first + count < n;
    if (count == 1) {
      out.push_back(product(step, traced, cotangents_next[first], retain));
    } else {
      for (StepVjp& v : batched_products(step, traced, cotangents_next, first, count, retain))
        out.push_back(std::move(v));
    }
    // Q cotangents live across the step: each in one block, not in malloc's heap as many small ones.
    if (n > 1) {
      for (size_t q = first; q < first + count; ++q) out[q].cotangent = packed(out[q].cotangent);
    }
    // A query's λ_{t+1} is spent once its λ_t is formed: at most one query holds both.
    for (size_t q = first; q < first + count; ++q) cotangents_next[q] = TrainState{};
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
  if (mode_ == ReplayMode::kPipelined && store_.budgeted()) {
    throw std::invalid_argument(
        "pipelined REPLAY recomputes a segment ahead, beyond a checkpoint budget; use ReplayMode::kSequential");
  }
}

ReplayResult ReplayBackward::run(const TensorTree& dq_dparams, const ReplayResume* from,
                                 const SegmentObserver& on_segment) const {
  return run_each({dq_dparams}, QueryProducts{}, from, on_segment).front();
}

std::vector<ReplayResult> ReplayBackward::run_each(const std::vector<TensorTree>& dq_dparams, QueryProducts how,
                                                   const ReplayResume* from, const SegmentObserver& on_segment) const {
  if (dq_dparams.empty()) throw std::invalid_argument("ReplayBackward::run_each: no query");
  if (from && (from->lambdas.size() != dq_dparams.size() || from->dws.size() != dq_dparams.size())) {
    throw std::invalid_argument(str_cat("ReplayBackward::run_each: resumed with ", from->dws.size(),
                                        " queries' progress for ", dq_dparams.size(), " queries"));
  }
  const int64_t n = step_.num_steps();
  const std::vector<int64_t>& checkpoints = store_.steps();
  const int64_t segments = static_cast<int64_t>(checkpoints.size());
  const int64_t first = segments - 1 - (from ? from->segments_done : 0);
  const size_t queries = dq_dparams.size();
  std::vector<ReplayResult> results(queries);
  if (from && from->segments_done >= segments) {  // finished before: nothing left to take
    for (size_t q = 0; q < queries; ++q) results[q] = ReplayResult{from->dws[q], from->lambdas[q], 0, 0};
    return results;
  }
  // Accumulated out of place, so that what on_segment was given stays as it was.
  std::vector<at::Tensor> dws(queries);
  for (size_t q = 0; q < queries; ++q) dws[q] = from ? from->dws[q] : at::zeros_like(w_);

  // λ_{t+1} of each query; starts as (∂Q/∂θ_N, 0, 0).
  std::vector<TrainState> lambdas;
  if (from && from->segments_done > 0) lambdas = from->lambdas;
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
        for (const auto& dq : dq_dparams) {
          TrainState start = step_.replay_start(traced.leaves, dq);
          lambdas.push_back(queries > 1 ? packed(start) : std::move(start));
        }
      }
      std::vector<StepVjp> vjps = backward_through_each(step_, std::move(traced), std::move(lambdas), how);
      lambdas = std::vector<TrainState>(queries);
      for (size_t q = 0; q < queries; ++q) {
        if (observer_) observer_(t, vjps[q]);
        if (q == 0 && tracing()) trace_replay_step(t, vjps[q], step_.trace_layout());
        lambdas[q] = std::move(vjps[q].cotangent);
        dws[q] = dws[q] + vjps[q].dw;
      }
    }
    if (on_segment) on_segment(ReplayResume{segments - k, lambdas, dws});
  }
  const int64_t peak = pipeline ? store_.count() + segment_states_held(checkpoints, n, mode_) : observed_states_held;
  for (size_t q = 0; q < queries; ++q) {
    results[q].dw = dws[q];
    results[q].initial_cotangent = lambdas[q];
    results[q].observed_states_held = pipeline ? pipeline->observed_states_held() : observed_states_held;
    results[q].peak_states_held = peak;
  }
  return results;
}

}  // namespace magic
