#include "lib/model/vocab_parallel_loss.h"

#include <limits>

#include "lib/core/strings.h"

namespace magic {

at::Tensor vocab_parallel_position_losses(const at::Tensor& logits, const at::Tensor& targets, const TokenLoss& options,
                                          const TensorParallel& tensor) {
  if (tensor.size() == 1) return position_losses(logits, targets, options);
  const VocabShard shard = vocab_shard(options.vocabulary, tensor.size(), tensor.index());
  if (logits.size(-1) != shard.local) {
    throw std::invalid_argument(
        str_cat("vocabulary-parallel loss: logits have ", logits.size(-1), " classes, the rank's shard ", shard.local));
  }
  const double eps = options.label_smoothing;
  if (!(eps >= 0.0 && eps < 1.0)) {
    throw std::invalid_argument(str_cat("token loss: label smoothing ", eps, " outside [0, 1)"));
  }
  const at::Tensor real = logits.narrow(-1, 0, shard.real);  // padding never reaches the softmax
  std::vector<int64_t> one_column = logits.sizes().vec();
  one_column.back() = 1;
  const at::Tensor local_max = shard.real > 0
                                   ? real.detach().amax(-1, true)
                                   : at::full(one_column, -std::numeric_limits<double>::infinity(), logits.options());
  const at::Tensor shift = tensor.loss_shift(local_max);
  const at::Tensor log_z = (shift + tensor.loss_sum_exp((real - shift).exp().sum(-1, true)).log()).squeeze(-1);

  const at::Tensor valid = targets.ne(kIgnoreLabel);
  const at::Tensor here = valid & targets.ge(shard.begin) & targets.lt(shard.begin + shard.real);
  const at::Tensor zero = at::zeros({}, logits.options());
  at::Tensor target_logit = at::zeros(targets.sizes(), logits.options());
  if (shard.real > 0) {
    const at::Tensor column = at::where(here, targets - shard.begin, at::zeros({}, targets.options()));
    target_logit = at::where(here, real.gather(-1, column.unsqueeze(-1)).squeeze(-1), zero);
  }
  at::Tensor loss = log_z - tensor.loss_target_logit(target_logit);
  if (eps > 0.0) {
    const at::Tensor mean_logit = tensor.loss_logit_sum(real.sum(-1)) / static_cast<double>(options.vocabulary);
    loss = (1.0 - eps) * loss + eps * (log_z - mean_logit);
  }
  return at::where(valid, loss, zero);
}

}  // namespace magic
