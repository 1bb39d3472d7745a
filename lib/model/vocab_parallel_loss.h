// The causal-LM token loss of lm_loss.h from a tensor-parallel rank's vocabulary columns of the
// logits (Megatron-core's vocab_parallel_cross_entropy). With p = softmax over the V real classes
// held across the tp ranks, m the global max, and x_v the logits:
//   log Z = m + log Σ_r Σ_{v ∈ r} exp(x_v − m),   ℓ = log Z − x_label
// smoothed as lm_loss.h says over the real vocabulary: ℓ_ε = (1−ε)·ℓ + ε·(log Z − (1/V)·Σ_v x_v).
// The shift m is reduced outside autograd (any constant is exact at every order); Σexp, the
// target's logit and Σ_v x_v come out of TensorParallel::sum_replicated (Σ forward, identity
// backward), because every rank consumes the same loss. Padding columns (a vocabulary tp does not
// divide) are cut off before the softmax. On one rank this is position_losses itself.
#pragma once

#include <ATen/ATen.h>

#include "lib/model/lm_loss.h"
#include "lib/model/tensor_parallel.h"

namespace magic {

// ℓ[b, j] for logits [B, T, local] (this rank's padded vocabulary shard) and aligned targets
// [B, T]; exactly 0 where the target is ignored. Replicated across the tp ranks.
at::Tensor vocab_parallel_position_losses(const at::Tensor& logits, const at::Tensor& targets, const TokenLoss& options,
                                          const TensorParallel& tensor);

}  // namespace magic
