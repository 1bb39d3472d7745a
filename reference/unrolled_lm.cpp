#include "reference/unrolled_lm.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/trace/trace_context.h"
#include "lib/trace/trace_sink.h"

namespace magic::reference {
namespace {

// Rows of `table` for `rows`, with one extra row (`fill`) standing for index N (padding).
at::Tensor rows_with_padding(const at::Tensor& table, const std::vector<int64_t>& rows, const at::Tensor& fill) {
  std::vector<at::Tensor> picked;
  for (int64_t r : rows) picked.push_back(r < table.size(0) ? table[r] : fill);
  return at::stack(picked);
}

// The parameters as the forward sees them: every one cast to the compute dtype.
TensorTree in_compute_dtype(const UnrolledLmSetup& setup, const TensorTree& params) {
  return params.map([&](const at::Tensor& p) { return p.to(setup.precision.compute); });
}

// With an encoder, `patches` [B, P, F] of the rows: its outputs are the first P columns' embeddings.
at::Tensor logits_in_master(const UnrolledLmSetup& setup, const TensorTree& params, const at::Tensor& ids,
                            const at::Tensor& patches) {
  const TensorTree computed = in_compute_dtype(setup, params);
  const at::Tensor prefix = setup.encoder
                                ? patch_encoder_forward(*setup.encoder, computed, patches.to(setup.precision.compute))
                                : at::Tensor();
  at::Tensor logits = gpt_forward(setup.model, computed, ids, prefix);
  trace_activation(logits, "logits", "logits", "head");  // recorded in a training step only
  return logits.to(setup.precision.master);
}

// The training run's records of step t (lib/trace), named as the distributed step names its own;
// the reference has no reduction, so its gradient before and after one is the same tensor.
void record_tree(const TensorTree& tree, const char* kind, const char* phase, int64_t t) {
  trace_tree(tree, {"", kind, phase, "first", t, "", {}});
}

// ∂loss/∂xs as the policy computes it: the backward of S·loss, divided by S.
std::vector<at::Tensor> scaled_grad(const UnrolledLmSetup& setup, const at::Tensor& loss,
                                    const std::vector<at::Tensor>& xs, bool create_graph) {
  const double S = setup.precision.loss_scale;
  auto grads = torch::autograd::grad({loss * S}, xs, {}, /*retain_graph=*/true, create_graph, /*allow_unused=*/true);
  for (auto& g : grads) {
    if (g.defined()) g = g / S;
  }
  return grads;
}

// The loss of the rows `weighted` and `valid` hold, normalized as the whole batch's: `mean`
// divides by the batch's valid labels, `batch_labels`.
at::Tensor reduced_loss(Reduction reduction, const at::Tensor& weighted, const at::Tensor& valid,
                        const at::Tensor& batch_labels) {
  switch (reduction) {
    case Reduction::kMean:
      return weighted.sum() / batch_labels;
    case Reduction::kSumOfMeans:
      return (weighted.sum(1) / valid.sum(1).clamp_min(1.0)).sum();
    case Reduction::kSum:
      return weighted.sum();
  }
  throw std::logic_error("bad reduction");
}

// Step t's records cut into the micro-batches' rows (UnrolledLmSetup::trace_micro_batches), in the
// order a run that accumulates makes them; none when the step's records are whole.
struct MicroBatchRecords {
  std::vector<at::Tensor> rows;
  std::optional<ScopedTraceContext> context;
  std::optional<MicroBatchOrder> order;

  MicroBatchRecords(const UnrolledLmSetup& setup, int64_t t) {
    if (!tracing() || !trace_context().active || t >= static_cast<int64_t>(setup.trace_micro_batches.size())) return;
    for (const auto& positions : setup.trace_micro_batches[t]) rows.push_back(at::tensor(positions, at::kLong));
    if (rows.empty()) return;
    TraceContext cut = trace_context();
    cut.micro_batch_rows = rows;
    context.emplace(std::move(cut));
    order.emplace();
  }
};

at::Tensor plain_batch_loss(const UnrolledLmSetup& setup, const TensorTree& params, const at::Tensor& w, int64_t t) {
  const TokenDataset& data = *setup.train;
  const std::vector<int64_t> rows = setup.stream.rows(t);
  const int64_t T = data.max_len();
  MicroBatchRecords micro_batches(setup, t);
  at::Tensor ids = rows_with_padding(data.input_ids, rows, at::full({T}, data.pad_id, at::kLong));
  at::Tensor labels = rows_with_padding(data.labels, rows, at::full({T}, kIgnoreLabel, at::kLong));
  std::vector<int64_t> zero_shape(w.sizes().begin() + 1, w.sizes().end());
  at::Tensor weights = rows_with_padding(w, rows, at::zeros(zero_shape, w.options()));
  trace_activation(ids, "input_ids", "input", "");

  at::Tensor patches;
  if (setup.encoder) {
    const at::Tensor& all = data.patches;
    patches = rows_with_padding(all, rows, at::zeros({all.size(1), all.size(2)}, all.options()));
  }
  at::Tensor losses = next_token_losses(logits_in_master(setup, params, ids, patches), labels,
                                        TokenLoss{setup.model.vocab, setup.label_smoothing});
  at::Tensor targets = labels.narrow(1, 1, T - 1);
  at::Tensor valid = targets.ne(kIgnoreLabel).to(losses.scalar_type());
  at::Tensor token_weights =
      weights.dim() == 1 ? weights.unsqueeze(1).expand({-1, T - 1}) : weights.narrow(1, 1, T - 1);
  at::Tensor weighted = token_weights * losses * valid;
  const at::Tensor batch_labels = valid.sum();
  at::Tensor loss = reduced_loss(setup.reduction, weighted, valid, batch_labels);
  if (tracing() && trace_context().active) {
    auto record = [&](int64_t micro_batch) {
      return TraceRecord{"loss", "loss", "forward", "forward", t, "", {}, micro_batch};
    };
    if (micro_batches.rows.empty()) trace_point(loss, [&] { return record(-1); });
    for (size_t k = 0; k < micro_batches.rows.size(); ++k) {
      const at::Tensor& r = micro_batches.rows[k];
      trace_point(reduced_loss(setup.reduction, weighted.index_select(0, r), valid.index_select(0, r), batch_labels),
                  [&] { return record(static_cast<int64_t>(k)); });
    }
  }
  if (micro_batches.order) micro_batches.order->flush();
  return loss;
}

// c = min(1, max_norm / (||g|| + 1e-6)) over every parameter's gradient, written out here rather
// than taken from lib/optim so that a slip there cannot cancel out.
at::Tensor plain_clip_coefficient(const TensorTree& grads, double max_norm) {
  at::Tensor squares = at::zeros({}, grads.begin()->tensor.options());
  for (const auto& g : grads) squares = squares + (g.tensor * g.tensor).sum();
  return (max_norm / (squares.sqrt() + 1e-6)).clamp_max(1.0);
}

// The document of every query chunk, and how many documents there are.
at::Tensor query_documents(const UnrolledLmSetup& setup) {
  std::vector<int64_t> documents;
  for (const auto& ex : setup.queries->examples) documents.push_back(ex.document);
  return at::tensor(documents, at::kLong);
}

int64_t query_document_count(const UnrolledLmSetup& setup) {
  return query_documents(setup).max().item<int64_t>() + 1;
}

// Q = mean over query documents of each document's mean next-token loss over the label positions
// of all its chunks; with `index`, document `index` alone.
at::Tensor plain_query_loss(const UnrolledLmSetup& setup, const TensorTree& params, std::optional<int64_t> index) {
  const at::Tensor ids = setup.queries->input_ids, labels = setup.queries->labels;
  at::Tensor losses = next_token_losses(logits_in_master(setup, params, ids, setup.queries->patches), labels,
                                        TokenLoss{setup.model.vocab, 0.0});
  at::Tensor valid = labels.narrow(1, 1, labels.size(1) - 1).ne(kIgnoreLabel).to(losses.scalar_type());
  const at::Tensor documents = query_documents(setup);
  const int64_t count = query_document_count(setup);
  at::Tensor loss_sums = at::zeros({count}, losses.options()).index_add(0, documents, (losses * valid).sum(1));
  at::Tensor label_counts = at::zeros({count}, losses.options()).index_add(0, documents, valid.sum(1));
  at::Tensor per_document = loss_sums / label_counts;
  return index ? per_document[*index] : per_document.mean();
}

// One training step from (θ_t, o_t), with the graph kept to both and to w: the gradient of the
// batch loss (create_graph), its clip, and the optimizer's update.
struct PlainStep {
  at::Tensor loss;            // L_t(θ_t)
  TensorTree grads, clipped;  // ∇L_t(θ_t), and c_t·∇L_t
  at::Tensor coefficient;     // c_t; undefined without clipping
  OptimizerUpdate update;     // (θ_{t+1}, o_{t+1})
};

PlainStep plain_step(const UnrolledLmSetup& setup, const TensorTree& params, const TensorTree& opt_state,
                     const at::Tensor& w, int64_t t) {
  PlainStep step;
  step.loss = plain_batch_loss(setup, params, w, t);
  step.grads = with_values(params, scaled_grad(setup, step.loss, params.tensors(), /*create_graph=*/true));
  step.clipped = step.grads;
  if (setup.clip_norm) {
    step.coefficient = plain_clip_coefficient(step.grads, *setup.clip_norm);
    step.clipped = step.grads.map([&](const at::Tensor& g) { return g * step.coefficient; });
  }
  step.update = setup.optimizer->update(params, step.clipped, opt_state);
  return step;
}

// The floating entries of every tree, in order (the optimizer's int64 count is not differentiable).
std::vector<at::Tensor> floating_tensors(const std::vector<TensorTree>& trees) {
  std::vector<at::Tensor> out;
  for (const auto& tree : trees) {
    for (const auto& t : tree.floating().tensors()) out.push_back(t);
  }
  return out;
}

// Zeros where autograd found no path (allow_unused), like `like`.
std::vector<at::Tensor> defined_or_zero(std::vector<at::Tensor> grads, const std::vector<at::Tensor>& like) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) grads[i] = at::zeros_like(like[i]);
  }
  return grads;
}

}  // namespace

TensorTree lm_batch_hvp(const UnrolledLmSetup& setup, const TensorTree& params_in, const at::Tensor& w, int64_t t,
                        const TensorTree& direction) {
  TensorTree params = params_in.requires_grad();
  at::Tensor loss = plain_batch_loss(setup, params, w.detach(), t);
  auto g = scaled_grad(setup, loss, params.tensors(), /*create_graph=*/true);
  at::Tensor gv = at::zeros({}, loss.options());
  size_t i = 0;
  for (const auto& d : direction) {
    if (g[i].defined()) gv = gv + (g[i] * d.tensor).sum();
    ++i;
  }
  return with_values(params, torch::autograd::grad({gv}, params.tensors(), {}, false, false, true)).detach();
}

TensorTree lm_query_gradient(const UnrolledLmSetup& setup, const TensorTree& params_in) {
  TensorTree params = params_in.requires_grad();
  at::Tensor q = plain_query_loss(setup, params, std::nullopt);
  return with_values(params, scaled_grad(setup, q, params.tensors(), false)).detach();
}

UnrolledLmResult unrolled_lm_scores(const UnrolledLmSetup& setup, const at::Tensor& w_in, bool per_query) {
  at::Tensor w = w_in.detach().clone().requires_grad_(true);
  TensorTree params = setup.initial_params.requires_grad();
  TensorTree opt_state = setup.optimizer->init(params);
  UnrolledLmResult result;
  std::vector<TensorTree> later_params, later_opt;  // θ_{t+1}, o_{t+1} in the graph
  for (int64_t t = 0; t < setup.stream.num_steps(); ++t) {
    const ScopedTraceContext context(TraceContext{tracing(), t, "forward", {}, -1, {}});
    const PlainStep step = plain_step(setup, params, opt_state, w, t);
    record_tree(step.grads, "gradient", "backward", t);
    record_tree(step.grads, "reduced_gradient", "reduction", t);
    if (step.coefficient.defined() && tracing()) {
      trace_point(step.coefficient,
                  [&] { return TraceRecord{"clip_coefficient", "other", "optimizer", "first", t, "", {}}; });
    }
    if (tracing())
      record_tree(add(step.update.params.detach(), scale(params.detach(), -1.0)), "update", "optimizer", t);
    result.step_params.push_back(params.detach());
    result.step_opt.push_back(opt_state.detach());
    result.step_grads.push_back(step.grads.detach());
    result.step_losses.push_back(step.loss.item<double>());
    if (step.coefficient.defined()) result.step_clip_coefficients.push_back(step.coefficient.detach());
    result.step_clipped.push_back(step.clipped.detach());
    // Fresh nodes for the state the next step consumes: dQ/d(node) counts every use of a node, and
    // Adam's θ_{t+1} is computed from the very tensor it stores as mu_{t+1} (the cotangent of
    // o_{t+1} must not include that path).
    params = step.update.params.map([](const at::Tensor& x) { return x.clone(); });
    opt_state = step.update.state.map([](const at::Tensor& x) { return x.clone(); });
    later_params.push_back(params);
    later_opt.push_back(opt_state.floating());
    if (setup.after_step) setup.after_step(t);
  }
  result.final_params = params.detach();
  if (!per_query) {
    at::Tensor q = plain_query_loss(setup, params, std::nullopt);
    result.query_loss = q.item<double>();
    // dQ/dw and, in the same backward, dQ/d(θ_t, o_t) at every later state: the cotangents.
    std::vector<at::Tensor> inputs{w};
    const std::vector<at::Tensor> states = floating_tensors(later_params), opts = floating_tensors(later_opt);
    inputs.insert(inputs.end(), states.begin(), states.end());
    inputs.insert(inputs.end(), opts.begin(), opts.end());
    const std::vector<at::Tensor> grads = defined_or_zero(scaled_grad(setup, q, inputs, false), inputs);
    result.scores = grads[0];
    size_t index = 1;
    for (const auto& p : later_params) {
      result.step_param_cotangents.push_back(with_values(p, grads, index).detach());
      index += p.size();
    }
    for (const auto& o : later_opt) {
      result.step_opt_cotangents.push_back(with_values(o, grads, index).detach());
      index += o.size();
    }
    return result;
  }
  std::vector<at::Tensor> rows;
  for (int64_t j = 0; j < query_document_count(setup); ++j) {
    at::Tensor q = plain_query_loss(setup, params, j);
    rows.push_back(scaled_grad(setup, q, {w}, false)[0]);
  }
  result.scores = at::stack(rows);
  return result;
}

LmStepVjp lm_step_vjp(const UnrolledLmSetup& setup, const TensorTree& params_in, const TensorTree& opt_in,
                      const at::Tensor& w_in, int64_t t, const TensorTree& param_cotangent,
                      const TensorTree& opt_cotangent) {
  const TensorTree params = params_in.requires_grad();
  // Only the floating entries are leaves; the count stays as it is.
  const TensorTree opt =
      opt_in.map([](const at::Tensor& e) { return e.is_floating_point() ? e.detach().requires_grad_(true) : e; });
  const at::Tensor w = w_in.detach().clone().requires_grad_(true);
  const PlainStep step = plain_step(setup, params, opt, w, t);
  std::vector<at::Tensor> outputs = step.update.params.tensors(), cotangents = param_cotangent.tensors();
  const TensorTree next_opt = step.update.state.floating();
  for (const auto& e : opt_cotangent) {
    outputs.push_back(next_opt.at(e.name));
    cotangents.push_back(e.tensor);
  }
  // Inputs: θ_t, o_t, and the clipped gradient (for μ); w enters the step only through it.
  std::vector<at::Tensor> inputs = params.tensors();
  const std::vector<at::Tensor> opt_leaves = opt.floating().tensors(), clipped = step.clipped.tensors();
  inputs.insert(inputs.end(), opt_leaves.begin(), opt_leaves.end());
  inputs.insert(inputs.end(), clipped.begin(), clipped.end());
  // As every backward of the policy: against S·λ, divided by S.
  const double S = setup.precision.loss_scale;
  for (auto& c : cotangents) c = c * S;
  std::vector<at::Tensor> grads = defined_or_zero(
      torch::autograd::grad(outputs, inputs, cotangents, /*retain_graph=*/true, false, /*allow_unused=*/true), inputs);
  for (auto& g : grads) g = g / S;
  LmStepVjp vjp;
  vjp.params = with_values(params, grads, 0).detach();
  vjp.opt = with_values(opt.floating(), grads, params.size()).detach();
  vjp.gradient_cotangent = with_values(params, grads, params.size() + opt_leaves.size()).detach();
  if (step.coefficient.defined()) {  // (μ·g)·∂c/∂θ: the clip's own term (0 where c = 1, the clamp's branch)
    const at::Tensor kappa = dot(vjp.gradient_cotangent, step.grads.detach()) * S;
    std::vector<at::Tensor> dc = defined_or_zero(
        torch::autograd::grad({step.coefficient}, params.tensors(), {kappa}, /*retain_graph=*/true, false, true),
        params.tensors());
    for (auto& d : dc) d = d / S;
    vjp.clip_gradient = with_values(params, dc, 0).detach();
  }
  // μ·∂(c·g)/∂(θ, w): the part of the product that runs through the batch's gradient.
  std::vector<at::Tensor> mu = vjp.gradient_cotangent.tensors(), through_inputs = params.tensors();
  for (auto& m : mu) m = m * S;
  through_inputs.push_back(w);
  std::vector<at::Tensor> through = defined_or_zero(
      torch::autograd::grad(clipped, through_inputs, mu, /*retain_graph=*/false, false, /*allow_unused=*/true),
      through_inputs);
  for (auto& g : through) g = g / S;
  vjp.through_gradient = with_values(params, through, 0).detach();
  vjp.dw = through.back().detach();
  return vjp;
}

}  // namespace magic::reference
