// Golden values for the label-smoothed token loss (lm_loss.h) that the reference and the engine
// share: token losses, their gradient and one Hessian-vector product in the logits, computed by
// PyTorch's own cross_entropy(label_smoothing=ε) in fixtures/golden/make_lm_loss_golden.py (an
// independent implementation), compared at 1e-12 for ε = 0, 0.1 and 0.35. The other common
// convention (ε spread over the V-1 other classes) is planted and must fail.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <cstdio>

#include "lib/io/safetensors.h"
#include "lib/model/lm_loss.h"
#include "tests/support.h"

namespace magic {
namespace {

constexpr double kTolerance = 1e-12;

const TensorTree& golden() {
  static const TensorTree g =
      load_safetensors(testing::source_path("fixtures/golden/lm_loss_golden.safetensors")).tensors;
  return g;
}

int64_t vocabulary() {
  return golden().at("logits").size(-1);
}

struct Ours {
  at::Tensor loss, grad, hvp;
};

Ours compute(const TokenLoss& options) {
  const TensorTree& g = golden();
  at::Tensor x = g.at("logits").clone().requires_grad_(true);
  Ours o;
  o.loss = position_losses(x, g.at("targets"), options);
  at::Tensor grad = torch::autograd::grad({(g.at("c") * o.loss).sum()}, {x}, {}, true, true)[0];
  o.hvp = torch::autograd::grad({(grad * g.at("v")).sum()}, {x})[0];
  o.grad = grad.detach();
  o.loss = o.loss.detach();
  return o;
}

double relative_error(const at::Tensor& ours, const at::Tensor& expected) {
  return (ours - expected).abs().max().item<double>() / expected.abs().max().item<double>();
}

// The worst relative error of loss, gradient and HVP against the golden ones of `key` ("eps10").
double worst_error(const Ours& o, const std::string& key, bool print) {
  const TensorTree& g = golden();
  const double loss = relative_error(o.loss, g.at("loss_" + key)), grad = relative_error(o.grad, g.at("grad_" + key)),
               hvp = relative_error(o.hvp, g.at("hvp_" + key));
  if (print) std::printf("  %-6s loss rel %.3g  grad rel %.3g  hvp rel %.3g\n", key.c_str(), loss, grad, hvp);
  return std::max({loss, grad, hvp});
}

TEST(LmLossGolden, LabelSmoothedLossGradientAndHvpMatchPyTorch) {
  ASSERT_TRUE(golden().at("targets").eq(kIgnoreLabel).any().item<bool>()) << "the fixture must ignore a target";
  std::printf("max error against fixtures/golden/lm_loss_golden.safetensors (tolerance %g):\n", kTolerance);
  for (const auto& [eps, key] : {std::pair{0.0, "eps0"}, {0.1, "eps10"}, {0.35, "eps35"}}) {
    EXPECT_LE(worst_error(compute(TokenLoss{vocabulary(), eps}), key, true), kTolerance) << key;
  }
}

TEST(LmLossGolden, IgnoredTargetsAreExactlyZeroToSecondOrder) {
  const at::Tensor ignored = golden().at("targets").eq(kIgnoreLabel);
  const Ours o = compute(TokenLoss{vocabulary(), 0.35});
  EXPECT_TRUE(o.loss.masked_select(ignored).eq(0).all().item<bool>());
  EXPECT_TRUE(o.grad.masked_select(ignored.unsqueeze(-1)).eq(0).all().item<bool>());
  EXPECT_TRUE(o.hvp.masked_select(ignored.unsqueeze(-1)).eq(0).all().item<bool>());
}

// ε/(V-1) on each other class and 1-ε on the label (another library's convention) is PyTorch's
// with ε' = εV/(V-1): a smoothing defined over the wrong class count.
TEST(LmLossGolden, PlantedOtherClassesConventionFails) {
  const double V = static_cast<double>(vocabulary());
  const double error = worst_error(compute(TokenLoss{vocabulary(), 0.1 * V / (V - 1)}), "eps10", false);
  std::printf("planted eps/(V-1) over the other classes: worst relative error %.3g\n", error);
  EXPECT_GT(error, 1e3 * kTolerance);
  // And smoothing applied twice, (1-ε)² on the label: ε' = 2ε - ε².
  EXPECT_GT(worst_error(compute(TokenLoss{vocabulary(), 0.2 - 0.01}), "eps10", false), 1e3 * kTolerance);
}

TEST(LmLossGolden, OptionsAreValidated) {
  const at::Tensor& logits = golden().at("logits");
  const at::Tensor& targets = golden().at("targets");
  for (double bad : {-0.1, 1.0, 1.5, std::nan("")}) {
    EXPECT_THROW(position_losses(logits, targets, TokenLoss{vocabulary(), bad}), std::invalid_argument) << bad;
  }
  EXPECT_THROW(position_losses(logits, targets, TokenLoss{vocabulary() + 1, 0.1}), std::invalid_argument);
  // ε = 0 is the plain loss, bit for bit.
  EXPECT_TRUE(
      at::equal(position_losses(logits, targets, TokenLoss{vocabulary(), 0.0}), position_losses(logits, targets)));
}

}  // namespace
}  // namespace magic
