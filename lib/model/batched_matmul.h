// The attention's batched matrix products, a·b over [..., m, k] x [..., k, n] with the same batch
// dimensions, taken on the strided views attention has (heads as transposes of [B, T, H, D],
// causal blocks as narrows of them) without copying them: one BLAS gemm a matrix, its
// transposes passed as gemm's flags, the matrices split over the intra-op threads.
// at::matmul copies such views to contiguous batches first, and at::bmm then runs its matrices one
// after another on one thread whatever the thread count (replay_bench's plain step: about a third
// of its time in bmm, which two threads did not shorten).
// Differentiable to any order: ∂a = g·bᵀ, ∂b = aᵀ·g, each again this product.
// Where no BLAS was linked, on another device or dtype, under vmap's batched tensors, or with batch
// dimensions that differ, it is at::matmul.
#pragma once

#include <ATen/ATen.h>

namespace magic {

at::Tensor batched_matmul(const at::Tensor& a, const at::Tensor& b);

// Whether batched_matmul(a, b) takes the gemm loop rather than at::matmul (for tests).
bool batched_matmul_uses_blas(const at::Tensor& a, const at::Tensor& b);

}  // namespace magic
