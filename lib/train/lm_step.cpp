#include "lib/train/lm_step.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/optim/clip.h"

namespace magic {
LmStep::LmStep(GptConfig model, std::shared_ptr<const TokenDataset> data, const DataStream& stream, Reduction reduction,
               std::shared_ptr<const Optimizer> optimizer, std::optional<double> clip_norm,
               std::shared_ptr<const DataParallelism> parallelism)
    : model_(model),
      data_(std::move(data)),
      reduction_(reduction),
      optimizer_(std::move(optimizer)),
      clip_norm_(clip_norm),
      parallelism_(std::move(parallelism)) {
  for (int64_t t = 0; t < stream.num_steps(); ++t) {
    batches_.push_back(make_batch(*data_, parallelism_->local_share(stream.rows(t))));
  }
}

at::Tensor LmStep::loss(const TensorTree& params, int64_t t, const at::Tensor& w) const {
  const Batch& batch = batches_.at(t);
  at::Tensor logits = gpt_forward(model_, parallelism_->enter(params), batch.input_ids);
  at::Tensor losses = next_token_losses(logits, batch.labels);
  at::Tensor mask = label_mask(batch.labels, losses.scalar_type());
  const double denominator =
      reduction_ == Reduction::kMean ? parallelism_->mean_denominator(mask.sum().item<double>()) : 1.0;
  return reduce_weighted_loss(losses, mask, gather_weights(w, batch.rows), reduction_, denominator);
}

TensorTree LmStep::gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const {
  const TensorTree& params = state.params;
  at::Tensor local_loss = loss(params, t, w);
  auto grads = torch::autograd::grad({local_loss}, params.tensors(), {}, /*retain_graph=*/create_graph,
                                     /*create_graph=*/create_graph, /*allow_unused=*/true);
  return parallelism_->apply_convention(parallelism_->reduce_gradient(with_values(params, grads)));
}

StepOutput LmStep::step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const {
  // Untraced steps still need leaves to differentiate the loss; traced ones use the caller's.
  const TensorTree params = traced ? s.params : s.params.requires_grad();
  TensorTree grads = gradient(TrainState{params, s.opt, s.persistent}, t, traced ? w : w.detach(), traced);

  at::AutoGradMode grad_mode(traced);
  if (clip_norm_) grads = clip_by_global_norm(grads, *clip_norm_);
  OptimizerUpdate update = optimizer_->update(traced ? params : params.detach(), grads, s.opt);
  StepOutput out{TrainState{update.params, update.state, s.persistent}, grads};
  if (!traced) {
    out.next = detach_state(out.next);
    out.grads = out.grads.detach();
  }
  return out;
}

at::Tensor LmStep::assemble_weight_gradient(const at::Tensor& local) const {
  return parallelism_->assemble_weight_gradient(local);
}

LmQuery::LmQuery(GptConfig model, TokenDataset queries, std::shared_ptr<const DataParallelism> parallelism)
    : model_(model), queries_(std::move(queries)), parallelism_(std::move(parallelism)) {
  std::vector<int64_t> all(queries_.size());
  for (int64_t j = 0; j < queries_.size(); ++j) all[j] = j;
  local_ = parallelism_->local_share(all);
  at::Tensor rows = at::tensor(local_, at::kLong);
  local_ids_ = queries_.input_ids.index_select(0, rows);
  local_labels_ = queries_.labels.index_select(0, rows);
}

TensorTree LmQuery::gradient(const TensorTree& params, std::optional<int64_t> index) const {
  return parallelism_->reduce_gradient(QueryFunction::gradient(params, index));
}

at::Tensor LmQuery::loss(const TensorTree& params, std::optional<int64_t> index) const {
  // Every rank runs the same operations (possibly on zero rows), so the collectives inside
  // enter()'s backward line up across ranks; a selection vector picks the queries that count.
  at::Tensor losses = next_token_losses(gpt_forward(model_, parallelism_->enter(params), local_ids_), local_labels_);
  at::Tensor mask = label_mask(local_labels_, losses.scalar_type());
  at::Tensor per_query = (losses * mask).sum(1) / mask.sum(1);
  std::vector<double> selection(local_.size(), index ? 0.0 : 1.0 / static_cast<double>(queries_.size()));
  for (size_t k = 0; k < local_.size(); ++k) {
    if (index && local_[k] == *index) selection[k] = 1.0;
  }
  at::Tensor select = at::tensor(selection, at::TensorOptions().dtype(at::kDouble)).to(per_query.scalar_type());
  return with_global_value(*parallelism_, (per_query * select).sum());
}

}  // namespace magic
