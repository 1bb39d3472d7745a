// Weighted causal-LM cross-entropy (DESIGN.md section 3). Logits are shifted by one: position
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

// ℓ[b, j] = -log softmax(logits[b, j])[labels[b, j+1]], exactly 0 where the label is ignored. [B, T-1]
at::Tensor next_token_losses(const at::Tensor& logits, const at::Tensor& labels);

// 1 where labels[b, j+1] is a real label, else 0; dtype of the losses. [B, T-1]
at::Tensor label_mask(const at::Tensor& labels, c10::ScalarType dtype);

// The weights aligned with next_token_losses: [B] -> [B, 1], [B, T] -> [B, T-1] (columns 1..T-1).
at::Tensor align_weights(const at::Tensor& weights);

// Reduces w·ℓ. `mean_denominator` is used by kMean only: the caller supplies the honest count of
// valid labels (for a distributed batch, the global count across every rank).
at::Tensor reduce_weighted_loss(const at::Tensor& token_losses, const at::Tensor& mask, const at::Tensor& weights,
                                Reduction reduction, double mean_denominator);

}  // namespace magic
