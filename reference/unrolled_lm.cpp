#include "reference/unrolled_lm.h"

#include <torch/csrc/autograd/autograd.h>

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

at::Tensor logits_in_master(const UnrolledLmSetup& setup, const TensorTree& params, const at::Tensor& ids) {
  return gpt_forward(setup.model, in_compute_dtype(setup, params), ids).to(setup.precision.master);
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

at::Tensor plain_batch_loss(const UnrolledLmSetup& setup, const TensorTree& params, const at::Tensor& w, int64_t t) {
  const TokenDataset& data = *setup.train;
  const std::vector<int64_t> rows = setup.stream.rows(t);
  const int64_t T = data.max_len();
  at::Tensor ids = rows_with_padding(data.input_ids, rows, at::full({T}, ByteTokenizer::kEndOfDocument, at::kLong));
  at::Tensor labels = rows_with_padding(data.labels, rows, at::full({T}, kIgnoreLabel, at::kLong));
  std::vector<int64_t> zero_shape(w.sizes().begin() + 1, w.sizes().end());
  at::Tensor weights = rows_with_padding(w, rows, at::zeros(zero_shape, w.options()));

  at::Tensor losses = next_token_losses(logits_in_master(setup, params, ids), labels);
  at::Tensor targets = labels.narrow(1, 1, T - 1);
  at::Tensor valid = targets.ne(kIgnoreLabel).to(losses.scalar_type());
  at::Tensor token_weights =
      weights.dim() == 1 ? weights.unsqueeze(1).expand({-1, T - 1}) : weights.narrow(1, 1, T - 1);
  at::Tensor weighted = token_weights * losses * valid;
  switch (setup.reduction) {
    case Reduction::kMean:
      return weighted.sum() / valid.sum();
    case Reduction::kSumOfMeans:
      return (weighted.sum(1) / valid.sum(1).clamp_min(1.0)).sum();
    case Reduction::kSum:
      return weighted.sum();
  }
  throw std::logic_error("bad reduction");
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
  at::Tensor losses = next_token_losses(logits_in_master(setup, params, ids), labels);
  at::Tensor valid = labels.narrow(1, 1, labels.size(1) - 1).ne(kIgnoreLabel).to(losses.scalar_type());
  const at::Tensor documents = query_documents(setup);
  const int64_t count = query_document_count(setup);
  at::Tensor loss_sums = at::zeros({count}, losses.options()).index_add(0, documents, (losses * valid).sum(1));
  at::Tensor label_counts = at::zeros({count}, losses.options()).index_add(0, documents, valid.sum(1));
  at::Tensor per_document = loss_sums / label_counts;
  return index ? per_document[*index] : per_document.mean();
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
  for (int64_t t = 0; t < setup.stream.num_steps(); ++t) {
    at::Tensor loss = plain_batch_loss(setup, params, w, t);
    TensorTree grads = with_values(params, scaled_grad(setup, loss, params.tensors(), /*create_graph=*/true));
    result.step_params.push_back(params.detach());
    result.step_opt.push_back(opt_state.detach());
    result.step_grads.push_back(grads.detach());
    if (setup.clip_norm) {
      const at::Tensor c = plain_clip_coefficient(grads, *setup.clip_norm);
      grads = grads.map([&](const at::Tensor& g) { return g * c; });
      result.step_clip_coefficients.push_back(c.detach());
    }
    result.step_clipped.push_back(grads.detach());
    OptimizerUpdate update = setup.optimizer->update(params, grads, opt_state);
    params = update.params;
    opt_state = update.state;
  }
  result.final_params = params.detach();
  if (!per_query) {
    at::Tensor q = plain_query_loss(setup, params, std::nullopt);
    result.query_loss = q.item<double>();
    result.scores = scaled_grad(setup, q, {w}, false)[0];
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

}  // namespace magic::reference
