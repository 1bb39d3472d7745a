// The model's operations, run in fp32 where LibTorch has no kernel for the input dtype.
// PyTorch 1.13's CPU kernels for fp16 (Half) lack addmm/bmm ("addmm_impl_cpu_ not implemented
// for 'Half'"), layer_norm, softmax, log_softmax and gelu; bf16 has them all, as CUDA has for
// both. Such an op widens its inputs to fp32, computes, and rounds its result back:
//   y = fp16(op(fp32(x)))
// which is what an fp16 GPU kernel with fp32 accumulation produces. Every other op (embedding
// lookup, add, mul, masked_fill, indexing) runs natively in fp16. Autograd sees the casts, so
// first and second derivatives flow through the same widened op.
#pragma once

#include <ATen/ATen.h>

namespace magic::kernels {

// Whether `t` has no CPU kernels for the ops below (fp16 on the CPU).
bool needs_fp32(const at::Tensor& t);

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});
// Batched products of equal batch dimensions go through batched_matmul.h (one gemm a matrix).
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b);
// In fp64 and fp32, layer_norm.h's (its second derivative in one pass).
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);
at::Tensor softmax(const at::Tensor& x, int64_t dim);
at::Tensor gelu(const at::Tensor& x);
// GPT-2's tanh form ("gelu_new"): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), from elementwise
// ops whose derivatives autograd knows to any order.
at::Tensor gelu_tanh(const at::Tensor& x);
at::Tensor sigmoid(const at::Tensor& x);
at::Tensor relu(const at::Tensor& x);

}  // namespace magic::kernels
