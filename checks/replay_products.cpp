#include "checks/replay_products.h"

#include <torch/csrc/autograd/autograd.h>

#include <functional>

#include "lib/step/mixed_precision.h"
#include "lib/train/replay_backward.h"

namespace magic::checks {
namespace {

// Zeros where autograd found no path (allow_unused).
std::vector<at::Tensor> defined_or_zero(std::vector<at::Tensor> grads, const std::vector<at::Tensor>& like) {
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = grads[i].defined() ? grads[i].detach() : at::zeros_like(like[i]);
  return grads;
}

// μ·∂g'/∂(θ, w) through REPLAY's traced step: the same trace REPLAY takes its product through,
// against μ alone (×S before, ÷S after, as REPLAY's cotangents); and the clip's term where it clips.
void add_through_gradient(ReplayProducts& into, const StepFunction& step, const Parallelism& parallel,
                          const TrainState& state, int64_t t, const at::Tensor& w, const TensorTree& mu,
                          const TensorTree& gradient) {
  const TracedStep traced = trace_step(step, state, t, w);
  const std::vector<at::Tensor> params = traced.leaves.params.tensors();
  if (traced.out.clip_coefficient.defined()) {
    // κ·∂c/∂θ with κ the cotangent c receives from μ where c scales the gradient, through the
    // same Parallelism::apply_clip as the step: each rank hands c its own part μ_r·g_r, which the
    // collectives sum where the ranks' pieces differ (the norm's all-reduce over sharded
    // gradients, or the copy_to_group that takes c to tensor-parallel pieces). The g here is the
    // teacher's, so that both sides share κ: at an entry whose gradient is rounding noise μ is of
    // size lr/eps, and a κ from this run's own g would carry that noise. A coefficient with no
    // graph (detached) has no derivative: zeros.
    const at::Tensor& c = traced.out.clip_coefficient;
    const double S = step.cotangent_scale();
    std::vector<at::Tensor> dc(params.size());
    if (c.requires_grad()) {
      const TensorTree scaled = parallel.apply_clip(cast_floating(gradient, c.scalar_type()), c);
      // (A tied embedding's last-stage copy takes c detached: its term is the first stage's.)
      std::vector<at::Tensor> outputs, cotangents;
      for (const auto& e : scaled) {
        if (!e.tensor.requires_grad()) continue;
        outputs.push_back(e.tensor);
        cotangents.push_back((mu.at(e.name) * S).to(c.scalar_type()));
      }
      dc = torch::autograd::grad(outputs, params, cotangents, /*retain_graph=*/true, false, true);
    }
    for (auto& d : dc) d = d.defined() ? d / S : d;
    into.clip_gradient.push_back(parallel.unshard(with_values(traced.leaves.params, defined_or_zero(dc, params))));
  }
  const double S = step.cotangent_scale();
  std::vector<at::Tensor> outputs, cotangents;
  for (const auto& g : traced.out.grads) {
    if (!g.tensor.requires_grad()) continue;
    outputs.push_back(g.tensor);
    cotangents.push_back(mu.at(g.name) * S);
  }
  std::vector<at::Tensor> inputs = params;
  inputs.push_back(traced.w_leaf);
  auto grads = defined_or_zero(torch::autograd::grad(outputs, inputs, cotangents, /*retain_graph=*/false,
                                                     /*create_graph=*/false, /*allow_unused=*/true),
                               inputs);
  for (auto& g : grads) g = g / S;
  into.through_gradient.push_back(parallel.unshard(with_values(traced.leaves.params, grads)));
  into.dw.push_back(step.assemble_weight_gradient(grads.back()));
}

// The optimizer slots ("mu.<param>", ...) by kind ("mu"), in order of first appearance.
std::vector<std::pair<std::string, std::vector<std::string>>> slots_by_kind(const TensorTree& opt) {
  std::vector<std::pair<std::string, std::vector<std::string>>> kinds;
  for (const auto& e : opt) {
    const std::string kind = e.name.substr(0, e.name.find('.'));
    if (kinds.empty() || kinds.back().first != kind) kinds.push_back({kind, {}});
    kinds.back().second.push_back(e.name);
  }
  return kinds;
}

}  // namespace

at::Tensor steps_of(const std::vector<TensorTree>& trees, const std::string& name) {
  std::vector<at::Tensor> steps;
  for (const auto& tree : trees) steps.push_back(tree.at(name).reshape({-1}));
  return at::cat(steps);
}

namespace {

// The state again, each kind's slots (slots_by_kind) mapped by `f` as one tree named by their
// parameters (one collective call per kind, so a pipeline stage's parameters go together); a
// 0-dim slot (the step count) as it is.
TensorTree map_kinds(const TensorTree& state, const std::function<TensorTree(const TensorTree&)>& f) {
  TensorTree out;
  for (const auto& [kind, names] : slots_by_kind(state)) {
    if (state.at(names.front()).dim() == 0) {
      for (const auto& name : names) out.insert(name, state.at(name).clone());
      continue;
    }
    TensorTree slots;
    for (const auto& name : names) slots.insert(name.substr(kind.size() + 1), state.at(name));
    for (const auto& [param, slot] : f(slots)) out.insert(kind + "." + param, slot);
  }
  return out;
}

}  // namespace

TensorTree shard_optimizer_state(const Parallelism& parallel, const TensorTree& full) {
  // A slot shards as its parameter (the name after the kind), which the plan splits by name.
  return map_kinds(full, [&](const TensorTree& slots) { return parallel.shard(slots); });
}

TensorTree unshard_optimizer_state(const Parallelism& parallel, const TensorTree& local) {
  // A slot unshards as its parameter (the name after the kind), whose full shape the layout knows.
  return map_kinds(local, [&](const TensorTree& slots) { return parallel.unshard(slots); });
}

void add_replay_products(ReplayProducts& into, const StepFunction& step, const Parallelism& parallel,
                         const TrainState& state, int64_t t, const at::Tensor& w, const TrainState& cotangent,
                         const TensorTree& gradient_cotangent, const TensorTree& gradient) {
  add_through_gradient(into, step, parallel, state, t, w, gradient_cotangent, gradient);
  const StepVjp whole = step_vjp(step, state, t, w, cotangent);
  into.params.push_back(parallel.unshard(whole.cotangent.params));
  into.opt.push_back(unshard_optimizer_state(parallel, whole.cotangent.opt));
}

void append_replay_product_outputs(PipelineOutputs& out, int64_t batch_labels, const ReplayProducts& products) {
  // Per parameter: a factor on one group's second-order term is that row's scale.
  for (const auto& p : products.through_gradient.front()) {
    out.push_back({"replay", p.name + "[vjp]", steps_of(products.through_gradient, p.name), 0.0,
                   /*shared_inputs=*/true, batch_labels});
  }
  std::vector<at::Tensor> dw;
  for (const auto& d : products.dw) dw.push_back(d.reshape({-1}));
  out.push_back({"replay", "w[vjp]", at::cat(dw), 0.0, true, batch_labels});
  if (!products.clip_gradient.empty()) {
    std::vector<at::Tensor> dc;
    for (const auto& tree : products.clip_gradient) dc.push_back(tree.flatten());
    out.push_back({"replay", "clip_coefficient[vjp]", at::cat(dc), 0.0, true, batch_labels});
  }
  // The whole step: every parameter in one row, and one row per kind of optimizer slot (a slot's
  // cotangent differs in size from the parameters' by orders). Judged in fp64, and in fp32 under
  // SGD; under Adam, ∂u/∂g at rounding-noise entries dominates (a correct bf16 run, dp=3,fsdp=3
  // adamw seed 38196: cosine 0.14 with fp64 where the policy's own was 0.86 off; in fp32 too, if
  // less: pipeline_outputs.h, through_adam_eps).
  std::vector<at::Tensor> theta;
  for (const auto& tree : products.params) theta.push_back(tree.flatten());
  out.push_back({"replay", "theta[step]", at::cat(theta), 0.0, false, batch_labels});
  out.back().judged_below_fp32 = false;
  out.back().through_adam_eps = true;
  for (const auto& [kind, names] : slots_by_kind(products.opt.front())) {
    std::vector<at::Tensor> parts;
    for (const auto& tree : products.opt) {
      for (const auto& name : names) parts.push_back(tree.at(name).reshape({-1}));
    }
    out.push_back({"replay", "opt." + kind + "[step]", at::cat(parts), 0.0, false, batch_labels});
    out.back().judged_below_fp32 = false;
    out.back().through_adam_eps = true;
  }
}

}  // namespace magic::checks
