// batched_matmul (lib/model/batched_matmul.h), one BLAS gemm a matrix on strided views, against
// at::matmul, an independent product: on the views attention takes (heads as transposes, causal
// blocks as narrows), on edge sizes, in fp64 and fp32; the same bits on one thread and two;
// gradcheck and gradgradcheck against finite differences; and at::matmul itself wherever the gemm
// loop does not apply.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include "checks/gradcheck.h"
#include "lib/core/seed.h"
#include "lib/model/batched_matmul.h"
#include "tests/support.h"

namespace magic {
namespace {

at::Tensor randn(at::IntArrayRef shape, uint64_t seed, at::ScalarType dtype = at::kDouble) {
  auto gen = make_generator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(dtype));
}

// Attention's operands: q and k as heads of one [B, T, 3·H·D] projection, k transposed, narrowed.
struct Heads {
  at::Tensor q, k, v;
};

Heads heads(int64_t B, int64_t T, int64_t H, int64_t D, at::ScalarType dtype = at::kDouble) {
  const at::Tensor qkv = randn({B, T, 3 * H * D}, 11, dtype);
  auto parts = qkv.split(H * D, -1);
  auto view = [&](const at::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  return {view(parts[0]), view(parts[1]), view(parts[2])};
}

void expect_like_matmul(const at::Tensor& a, const at::Tensor& b, double tolerance, const std::string& what) {
  ASSERT_TRUE(batched_matmul_uses_blas(a, b)) << what;
  const at::Tensor ours = batched_matmul(a, b), theirs = at::matmul(a, b);
  ASSERT_EQ(ours.sizes(), theirs.sizes()) << what;
  EXPECT_LE(testing::relative_error(ours, theirs), tolerance) << what;
}

TEST(BatchedMatmul, EqualsMatmulOnAttentionsViews) {
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    const double tolerance = dtype == at::kDouble ? 1e-14 : 1e-6;
    const Heads h = heads(3, 20, 2, 5, dtype);
    expect_like_matmul(h.q, h.k.transpose(-2, -1), tolerance, "q kᵀ");
    const at::Tensor p = at::softmax(at::matmul(h.q, h.k.transpose(-2, -1)), -1);
    expect_like_matmul(p, h.v, tolerance, "p v");
    // A causal block: rows [8, 14) of q against keys [0, 14).
    expect_like_matmul(h.q.narrow(2, 8, 6), h.k.narrow(2, 0, 14).transpose(-2, -1), tolerance, "block q kᵀ");
    expect_like_matmul(p.narrow(2, 8, 6).narrow(3, 0, 14), h.v.narrow(2, 0, 14), tolerance, "block p v");
    // The backward's operands: both transposed, and a contiguous batch of three dimensions.
    expect_like_matmul(h.k.transpose(-2, -1), p.transpose(-2, -1), tolerance, "kᵀ pᵀ");
    expect_like_matmul(randn({2, 3, 4, 5, 6}, 12, dtype), randn({2, 3, 4, 6, 7}, 13, dtype), tolerance, "5-D");
  }
}

TEST(BatchedMatmul, EqualsMatmulOnEdgeSizes) {
  expect_like_matmul(randn({4, 1, 6}, 1), randn({4, 6, 3}, 2), 1e-14, "one row");
  expect_like_matmul(randn({4, 5, 1}, 3), randn({4, 1, 3}, 4), 1e-14, "inner dimension one");
  expect_like_matmul(randn({4, 5, 6}, 5), randn({4, 6, 1}, 6), 1e-14, "one column");
  expect_like_matmul(randn({4, 1, 6}, 7).transpose(-2, -1), randn({4, 1, 3}, 8), 1e-14, "a transposed row");
  // A batch dimension broadcast by expand (stride 0), and a matrix expanded (copied first).
  expect_like_matmul(randn({1, 5, 6}, 9).expand({4, 5, 6}), randn({4, 6, 3}, 10), 1e-14, "expanded batch");
  expect_like_matmul(randn({4, 5, 1}, 11).expand({4, 5, 6}), randn({4, 6, 3}, 12), 1e-14, "expanded columns");
  const at::Tensor empty_inner = batched_matmul(randn({4, 5, 0}, 13), randn({4, 0, 3}, 14));
  EXPECT_TRUE(at::equal(empty_inner, at::zeros({4, 5, 3}, empty_inner.options())));
  EXPECT_EQ(batched_matmul(randn({0, 5, 2}, 15), randn({0, 2, 3}, 16)).sizes(), (at::IntArrayRef{0, 5, 3}));
}

TEST(BatchedMatmul, GivesTheSameBitsOnOneThreadAndTwo) {
  const Heads h = heads(4, 64, 4, 8);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = batched_matmul(h.q, h.k.transpose(-2, -1));
  at::set_num_threads(2);
  const at::Tensor two = batched_matmul(h.q, h.k.transpose(-2, -1));
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(one, two));
}

TEST(BatchedMatmul, TakesMatmulWhereTheGemmLoopDoesNotApply) {
  const at::Tensor a = randn({4, 5, 6}, 1), b = randn({4, 6, 3}, 2);
  EXPECT_FALSE(batched_matmul_uses_blas(a[0], b[0]));                                // no batch
  EXPECT_FALSE(batched_matmul_uses_blas(a, b[0]));                                   // broadcast
  EXPECT_FALSE(batched_matmul_uses_blas(a.narrow(0, 0, 1), b));                      // batches differ
  EXPECT_FALSE(batched_matmul_uses_blas(a.to(at::kBFloat16), b.to(at::kBFloat16)));  // no gemm here
  EXPECT_FALSE(batched_matmul_uses_blas(a, b.to(at::kFloat)));                       // mixed
  EXPECT_LE(testing::relative_error(batched_matmul(a, b[0]), at::matmul(a, b[0])), 0.0);
  const at::Tensor low = batched_matmul(a.to(at::kBFloat16), b.to(at::kBFloat16));
  EXPECT_TRUE(at::equal(low, at::matmul(a.to(at::kBFloat16), b.to(at::kBFloat16))));
}

TEST(BatchedMatmul, PassesGradcheckAndGradgradcheck) {
  // The views attention differentiates through: a transposed k and a narrowed block.
  auto fn = [](const std::vector<at::Tensor>& x) {
    const at::Tensor q = x[0].transpose(1, 2), k = x[1].transpose(1, 2);
    const at::Tensor scores = batched_matmul(q.narrow(2, 1, 3), k.narrow(2, 0, 4).transpose(-2, -1));
    return std::vector<at::Tensor>{batched_matmul(at::tanh(scores), k.narrow(2, 0, 4))};
  };
  const std::vector<at::Tensor> inputs{randn({2, 5, 2, 3}, 3).requires_grad_(true),
                                       randn({2, 5, 2, 3}, 4).requires_grad_(true)};
  const checks::GradcheckResult first = checks::gradcheck(fn, inputs);
  EXPECT_TRUE(first.passed) << first.message;
  EXPECT_GT(first.compared, 0);
  const checks::GradcheckResult second = checks::gradgradcheck(fn, inputs);
  EXPECT_TRUE(second.passed) << second.message;
  EXPECT_GT(second.compared, 0);
}

}  // namespace
}  // namespace magic
