#include "lib/model/lm_loss.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/model/cross_entropy_rows.h"

namespace magic {

Reduction parse_reduction(const std::string& name, const std::string& what) {
  if (name == "mean") return Reduction::kMean;
  if (name == "sum_of_means") return Reduction::kSumOfMeans;
  if (name == "sum") return Reduction::kSum;
  throw InputError(str_cat(what, ": unknown reduction '", name, "'; expected one of mean, sum_of_means, sum"));
}

std::string reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::kMean:
      return "mean";
    case Reduction::kSumOfMeans:
      return "sum_of_means";
    case Reduction::kSum:
      return "sum";
  }
  return "?";
}

void validate_token_loss(const TokenLoss& options, const at::Tensor& logits) {
  const double eps = options.label_smoothing;
  if (!(eps >= 0.0 && eps < 1.0)) {
    throw std::invalid_argument(str_cat("token loss: label smoothing ", eps, " outside [0, 1)"));
  }
  if (logits.size(-1) != options.vocabulary) {
    throw std::invalid_argument(
        str_cat("token loss: logits have ", logits.size(-1), " classes, the vocabulary ", options.vocabulary));
  }
}

at::Tensor next_token_losses(const at::Tensor& logits, const at::Tensor& labels) {
  return next_token_losses(logits, labels, TokenLoss{logits.size(-1), 0.0});
}

at::Tensor next_token_losses(const at::Tensor& logits, const at::Tensor& labels, const TokenLoss& options) {
  const int64_t T = logits.size(1);
  return position_losses(logits.narrow(1, 0, T - 1), labels.narrow(1, 1, T - 1), options);
}

at::Tensor position_losses(const at::Tensor& logits, const at::Tensor& targets) {
  return position_losses(logits, targets, TokenLoss{logits.size(-1), 0.0});
}

at::Tensor position_losses(const at::Tensor& logits, const at::Tensor& targets, const TokenLoss& options) {
  validate_token_loss(options, logits);
  at::Tensor valid = targets.ne(kIgnoreLabel);
  const at::Tensor loss = cross_entropy_rows(logits, targets.clamp_min(0), options.label_smoothing);
  // where() rather than a multiply: ignored positions are exactly 0 and carry exactly-zero
  // gradients to every order.
  return at::where(valid, loss, at::zeros({}, loss.options()));
}

at::Tensor next_token_targets(const at::Tensor& labels, int64_t padded_length) {
  const int64_t B = labels.size(0), T = labels.size(1);
  at::Tensor tail = at::full({B, padded_length - T + 1}, kIgnoreLabel, labels.options());
  return at::cat({labels.narrow(1, 1, T - 1), tail}, 1);
}

at::Tensor next_token_weights(const at::Tensor& weights, int64_t padded_length) {
  if (weights.dim() == 1) return weights.unsqueeze(1);
  const int64_t B = weights.size(0), T = weights.size(1);
  return at::cat({weights.narrow(1, 1, T - 1), at::zeros({B, padded_length - T + 1}, weights.options())}, 1);
}

at::Tensor label_mask(const at::Tensor& labels, c10::ScalarType dtype) {
  return labels.narrow(1, 1, labels.size(1) - 1).ne(kIgnoreLabel).to(dtype);
}

at::Tensor align_weights(const at::Tensor& weights) {
  if (weights.dim() == 1) return weights.unsqueeze(1);
  return weights.narrow(1, 1, weights.size(1) - 1);
}

at::Tensor reduce_weighted_loss(const at::Tensor& token_losses, const at::Tensor& mask, const at::Tensor& weights,
                                Reduction reduction, double mean_denominator) {
  return reduce_aligned_loss(token_losses, mask, align_weights(weights), reduction, mean_denominator, mask.sum(1));
}

at::Tensor reduce_aligned_loss(const at::Tensor& token_losses, const at::Tensor& mask, const at::Tensor& weights,
                               Reduction reduction, double mean_denominator, const at::Tensor& row_labels) {
  at::Tensor weighted = weights * token_losses * mask;
  switch (reduction) {
    case Reduction::kMean:
      if (!(mean_denominator > 0)) throw std::invalid_argument("reduce_weighted_loss: a mean over no valid labels");
      return weighted.sum() / mean_denominator;
    case Reduction::kSumOfMeans:
      return (weighted.sum(1) / row_labels.to(weighted.scalar_type()).clamp_min(1.0)).sum();
    case Reduction::kSum:
      return weighted.sum();
  }
  throw std::logic_error("reduce_weighted_loss: bad reduction");
}

}  // namespace magic
