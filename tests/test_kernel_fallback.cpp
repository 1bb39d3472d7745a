// Ops without fp16 CPU kernels run widened: one rounding of an fp32-accurate result, checked
// against fp64; the GPT runs forward and to second order in fp16 and bf16 on the CPU.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/precision_policy.h"
#include "lib/core/seed.h"
#include "lib/model/gpt.h"
#include "lib/model/kernel_fallback.h"
#include "lib/step/mixed_precision.h"

namespace magic {
namespace {

at::Tensor random(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = make_generator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble));
}

TEST(KernelFallback, Fp16OpsAreOneRoundingOfTheExactResult) {
  EXPECT_TRUE(kernels::needs_fp32(at::zeros({1}, at::kHalf)));
  EXPECT_FALSE(kernels::needs_fp32(at::zeros({1}, at::kBFloat16)));
  // Inputs exactly representable in fp16, so the only error is the output rounding (and the
  // fp32 accumulation, ~8 terms x 2^-24): |y16 - y| <= 2^-11 |y| + 1e-6 max|y|.
  const at::Tensor x = random({5, 8}, 1).to(at::kHalf), w = random({6, 8}, 2).to(at::kHalf),
                   b = random({6}, 3).to(at::kHalf);
  auto within_one_rounding = [](const at::Tensor& y16, const at::Tensor& exact) {
    const at::Tensor err = (y16.to(at::kDouble) - exact).abs();
    const double scale = exact.abs().max().item<double>();
    return (err <= exact.abs() * unit_roundoff(c10::kHalf) + 1e-6 * scale).all().item<bool>();
  };
  const at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble), bd = b.to(at::kDouble);
  EXPECT_EQ(kernels::linear(x, w, b).scalar_type(), at::kHalf);
  EXPECT_TRUE(within_one_rounding(kernels::linear(x, w, b), at::linear(xd, wd, bd)));
  EXPECT_TRUE(within_one_rounding(kernels::matmul(x, w.t()), at::matmul(xd, wd.t())));
  EXPECT_TRUE(within_one_rounding(kernels::softmax(x, -1), at::softmax(xd, -1)));
  EXPECT_TRUE(within_one_rounding(kernels::gelu(x), at::gelu(xd)));
  EXPECT_TRUE(within_one_rounding(kernels::sigmoid(x), at::sigmoid(xd)));
  const at::Tensor g = random({8}, 4).to(at::kHalf), h = random({8}, 5).to(at::kHalf);
  EXPECT_TRUE(within_one_rounding(kernels::layer_norm(x, g, h, 1e-5),
                                  at::layer_norm(xd, {8}, g.to(at::kDouble), h.to(at::kDouble), 1e-5)));
}

TEST(KernelFallback, GptRunsToSecondOrderInFp16AndBf16OnTheCpu) {
  GptConfig config;
  config.d_model = 16;
  config.n_layers = 1;
  config.max_len = 8;
  const TensorTree params = gpt_init(config, at::kFloat, 0);
  at::Tensor ids = at::randint(0, 257, {2, 8}, make_generator(1), at::TensorOptions().dtype(at::kLong));
  const at::Tensor exact = gpt_forward(config, gpt_init(config, at::kDouble, 0), ids);
  for (c10::ScalarType dtype : {c10::kHalf, c10::kBFloat16}) {
    TensorTree leaves = params.requires_grad();
    at::Tensor logits = gpt_forward(config, cast_floating(leaves, dtype), ids);
    ASSERT_EQ(logits.scalar_type(), dtype);
    // A few roundings per layer: well within 64u of the fp64 logits' size.
    const double err = ((logits.to(at::kDouble) - exact).abs().max() / exact.abs().max()).item<double>();
    EXPECT_LT(err, 64 * unit_roundoff(dtype)) << c10::toString(dtype);
    at::Tensor loss = logits.to(at::kFloat).pow(2).mean();
    auto g = torch::autograd::grad({loss}, leaves.tensors(), {}, true, true, true);
    at::Tensor gv = at::zeros({}, at::kFloat);
    for (const auto& gi : g) gv = gv + gi.sum();
    auto hv = torch::autograd::grad({gv}, leaves.tensors(), {}, false, false, true);
    for (const auto& h : hv) {
      if (h.defined()) {
        EXPECT_TRUE(h.isfinite().all().item<bool>()) << c10::toString(dtype);
      }
    }
  }
}

}  // namespace
}  // namespace magic
