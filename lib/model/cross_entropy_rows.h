// Cross-entropy of each row of logits z [..., V] against its target t with label smoothing ε,
// written so that REPLAY's graph of a traced backward holds z and the rows' incoming gradient g
// (a scalar a row) instead of log softmax(z) and its dense gradient, and so that a product, which
// reaches this node with every other pending gradient alive, forms its derivative a block of rows
// at a time (the demo's peak: 48 MiB lower, of 16 MiB [B, T, V] tensors):
//   ℓ = lse(z) − (1−ε)·z_t − (ε/V)·Σ_v z_v   (= −(1−ε)·log p_t − (ε/V)·Σ_v log p_v,  p = softmax(z))
//   ∂ℓ/∂z = g·(p − c),  c = (1−ε)·onehot(t) + ε/V
//   for a cotangent u of ∂ℓ/∂z:  ∂/∂g = ⟨u, p − c⟩,  ∂/∂z = g·p⊙(u − ⟨u, p⟩)
// Every derivative is formed from differentiable ops on z, so it is correct to any order.
// fp64 and fp32; other dtypes, and vmap's batched logits, take log_softmax and gather.
#pragma once

#include <ATen/ATen.h>

namespace magic {

// targets: indices in [0, V) of z's shape without the last dimension.
at::Tensor cross_entropy_rows(const at::Tensor& logits, const at::Tensor& targets, double label_smoothing);

}  // namespace magic
