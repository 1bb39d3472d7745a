#include "lib/train/lm_step.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/optim/clip.h"

namespace magic {

LmStep::LmStep(GptConfig model, std::shared_ptr<const TokenDataset> data, const DataStream& stream,
               Reduction reduction, std::shared_ptr<const Optimizer> optimizer, std::optional<double> clip_norm)
    : model_(model), data_(std::move(data)), reduction_(reduction), optimizer_(std::move(optimizer)),
      clip_norm_(clip_norm) {
  for (int64_t t = 0; t < stream.num_steps(); ++t) batches_.push_back(make_batch(*data_, stream.rows(t)));
}

StepOutput LmStep::step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const {
  const Batch& batch = batches_.at(t);
  // Untraced steps still need leaves to differentiate the loss; traced ones use the caller's.
  const TensorTree params = traced ? s.params : s.params.requires_grad();
  at::Tensor logits = gpt_forward(model_, params, batch.input_ids);
  at::Tensor losses = next_token_losses(logits, batch.labels);
  at::Tensor mask = label_mask(batch.labels, losses.scalar_type());
  at::Tensor weights = gather_weights(traced ? w : w.detach(), batch.rows);
  at::Tensor loss = reduce_weighted_loss(losses, mask, weights, reduction_, mask.sum().item<double>());

  auto grad_list = torch::autograd::grad({loss}, params.tensors(), {}, /*retain_graph=*/traced,
                                         /*create_graph=*/traced, /*allow_unused=*/true);
  TensorTree grads;
  size_t i = 0;
  for (const auto& p : params) {
    grads.insert(p.name, grad_list[i].defined() ? grad_list[i] : at::zeros_like(p.tensor));
    ++i;
  }

  at::AutoGradMode grad_mode(traced);
  if (clip_norm_) grads = clip_by_global_norm(grads, *clip_norm_);
  OptimizerUpdate update = optimizer_->update(traced ? params : params.detach(), grads, s.opt);
  StepOutput out{TrainState{update.params, update.state, s.persistent}, grads, loss};
  if (!traced) {
    out.next = detach_state(out.next);
    out.grads = out.grads.detach();
    out.loss = out.loss.detach();
  }
  return out;
}

LmQuery::LmQuery(GptConfig model, TokenDataset queries) : model_(model), queries_(std::move(queries)) {}

at::Tensor LmQuery::loss(const TensorTree& params, std::optional<int64_t> index) const {
  at::Tensor ids = queries_.input_ids, labels = queries_.labels;
  if (index) {
    ids = ids.narrow(0, *index, 1);
    labels = labels.narrow(0, *index, 1);
  }
  at::Tensor losses = next_token_losses(gpt_forward(model_, params, ids), labels);
  at::Tensor mask = label_mask(labels, losses.scalar_type());
  return ((losses * mask).sum(1) / mask.sum(1)).mean();
}

}  // namespace magic
