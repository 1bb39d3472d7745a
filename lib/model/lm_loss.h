// Weighted causal-LM cross-entropy (docs/design.md, "The mathematics"). Logits are shifted by one: position
// j's logits predict labels[j+1]; labels of -100 are ignored. Weights are per document [B]
// (broadcast over tokens) or per token [B, T], where weights[b, j] weighs the loss on
// labels[b, j] (so position 0, which no logit predicts, never counts).
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace magic {

constexpr int64_t kIgnoreLabel = -100;

enum class Reduction {
  kMean,        // Σ w·ℓ / (valid label tokens of the global batch), weight-independent denominator
  kSumOfMeans,  // Σ_b (Σ_j w·ℓ) / (valid labels of row b)
  kSum,         // Σ w·ℓ
};
Reduction parse_reduction(const std::string& name, const std::string& what = "reduction");
std::string reduction_name(Reduction reduction);

// The per-token loss's options. Label smoothing as PyTorch's cross_entropy(label_smoothing=ε): the
// target puts 1-ε on the label and spreads ε uniformly over the V classes of the real vocabulary,
// the label included, so with p = softmax(logits)
//   ℓ = (1-ε)·(-log p_label) + ε·(1/V)·Σ_{v<V} (-log p_v).
// V is stated, not read off the logits: a vocabulary-parallel head will hold padding columns that
// are no class (today the logits' last dimension must equal V).
struct TokenLoss {
  int64_t vocabulary = 0;        // V
  double label_smoothing = 0.0;  // ε in [0, 1)
};

// std::invalid_argument when ε is outside [0, 1) or the logits do not have V classes.
void validate_token_loss(const TokenLoss& options, const at::Tensor& logits);

// ℓ[b, j] = -log softmax(logits[b, j])[labels[b, j+1]] (smoothed as `options` say), exactly 0 where
// the label is ignored. [B, T-1]. Without options: no smoothing, over every column of the logits.
at::Tensor next_token_losses(const at::Tensor& logits, const at::Tensor& labels);
at::Tensor next_token_losses(const at::Tensor& logits, const at::Tensor& labels, const TokenLoss& options);

// The same with the targets already aligned to the logits: ℓ[b, j] = -log softmax(logits[b, j])[targets[b, j]].
// Context parallelism shards targets, not labels: a chunk's last target is the next chunk's first label.
at::Tensor position_losses(const at::Tensor& logits, const at::Tensor& targets);
at::Tensor position_losses(const at::Tensor& logits, const at::Tensor& targets, const TokenLoss& options);

// targets[b, j] = labels[b, j+1] for a batch padded to `padded_length` columns; ignored past the end. [B, P]
at::Tensor next_token_targets(const at::Tensor& labels, int64_t padded_length);

// The weights aligned with next_token_targets: [B] -> [B, 1]; [B, T] -> [B, P] with w[b, j+1] at
// column j and 0 past the end (the padding is a constant, so dw ignores it).
at::Tensor next_token_weights(const at::Tensor& weights, int64_t padded_length);

// 1 where labels[b, j+1] is a real label, else 0; dtype of the losses. [B, T-1]
at::Tensor label_mask(const at::Tensor& labels, c10::ScalarType dtype);

// The weights aligned with next_token_losses: [B] -> [B, 1], [B, T] -> [B, T-1] (columns 1..T-1).
at::Tensor align_weights(const at::Tensor& weights);

// Reduces w·ℓ. `mean_denominator` is used by kMean only: the caller supplies the honest count of
// valid labels (for a distributed batch, the global count across every rank).
at::Tensor reduce_weighted_loss(const at::Tensor& token_losses, const at::Tensor& mask, const at::Tensor& weights,
                                Reduction reduction, double mean_denominator);

// The same for losses, mask and weights already aligned (weights [B, 1] or [B, T_local]), when
// the columns are a shard of each row: `row_labels` [B] counts each whole row's valid labels
// (kSumOfMeans divides by it). A shard's result is its partial sum of the whole batch's loss.
at::Tensor reduce_aligned_loss(const at::Tensor& token_losses, const at::Tensor& mask, const at::Tensor& weights,
                               Reduction reduction, double mean_denominator, const at::Tensor& row_labels);

}  // namespace magic
