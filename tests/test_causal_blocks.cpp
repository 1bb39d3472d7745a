// Causal attention in query blocks (lib/model/gpt.cpp, a whole in-order sequence) against the
// masked attention over every key that the PyTorch golden values check (test_gpt_golden.cpp, at
// sequence lengths below one block): the same logits, gradient and Hessian-vector product to
// rounding on even and uneven blocks, with rotary positions too; and gradcheck / gradgradcheck
// against finite differences, an oracle of their own.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "checks/gradcheck.h"
#include "lib/core/seed.h"
#include "lib/model/gpt.h"
#include "lib/model/model_layout.h"

namespace magic {
namespace {

// The same columns with the blocks off: every query against every key, the future masked.
ModelLayout unblocked(int64_t columns) {
  ModelLayout layout = ModelLayout::whole(columns);
  layout.sequence.keys_in_order = false;
  return layout;
}

struct Derivatives {
  at::Tensor logits;
  std::vector<at::Tensor> grad, hvp;
};

// logits, ∇⟨r, logits⟩ and its derivative along u, both taken through the model's backward.
Derivatives derivatives(const GptConfig& c, const TensorTree& params, const at::Tensor& ids,
                        const ModelLayout& layout) {
  const TensorTree leaves = params.requires_grad();
  const at::Tensor logits = gpt_forward(c, leaves, ids, layout);
  auto gen = make_generator(7);
  const at::Tensor r = at::randn(logits.sizes(), gen, logits.options());
  const std::vector<at::Tensor> grad =
      torch::autograd::grad({(logits * r).sum()}, leaves.tensors(), {}, /*retain_graph=*/true, /*create_graph=*/true);
  at::Tensor along = at::zeros({}, logits.options());
  for (const at::Tensor& g : grad) along = along + (g * at::randn(g.sizes(), gen, g.options())).sum();
  const std::vector<at::Tensor> hvp = torch::autograd::grad({along}, leaves.tensors());
  Derivatives d{logits.detach(), {}, hvp};
  for (const at::Tensor& g : grad) d.grad.push_back(g.detach());
  return d;
}

double relative(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

void expect_same(const GptConfig& c, int64_t columns) {
  ASSERT_GT(causal_blocks(columns), 1) << columns;  // the blocked path runs
  const TensorTree params = gpt_init(c, at::kDouble, 3);
  auto gen = make_generator(static_cast<uint64_t>(columns));
  const at::Tensor ids = at::randint(c.vocab, {3, columns}, gen, at::TensorOptions().dtype(at::kLong));
  const Derivatives blocked = derivatives(c, params, ids, ModelLayout::whole(columns));
  const Derivatives masked = derivatives(c, params, ids, unblocked(columns));
  EXPECT_LE(relative(blocked.logits, masked.logits), 1e-13) << columns;
  for (size_t i = 0; i < masked.grad.size(); ++i) {
    EXPECT_LE(relative(blocked.grad[i], masked.grad[i]), 1e-12) << columns << " gradient " << i;
    EXPECT_LE(relative(blocked.hvp[i], masked.hvp[i]), 1e-11) << columns << " hvp " << i;
  }
}

TEST(CausalBlocks, EqualTheMaskedAttentionOnEvenAndUnevenBlocks) {
  const GptConfig c{40, 16, 2, 2, 128};
  for (const int64_t columns : {64, 70, 128, 127}) expect_same(c, columns);  // 2, 2, 4 and 4 blocks
}

TEST(CausalBlocks, EqualTheMaskedAttentionWithRotaryPositions) {
  GptConfig c{40, 16, 1, 2, 96};
  c.positions = Positions::kRotary;
  c.rotary_dims = 4;
  c.parallel_residual = true;
  expect_same(c, 96);  // 3 blocks
}

TEST(CausalBlocks, PassGradcheckAndGradgradcheck) {
  const GptConfig c{5, 4, 1, 1, 64};
  const TensorTree params = gpt_init(c, at::kDouble, 4);
  auto gen = make_generator(5);
  const at::Tensor ids = at::randint(c.vocab, {1, 64}, gen, at::TensorOptions().dtype(at::kLong));
  const std::string name = "blocks.0.attn.qkv.weight";
  auto fn = [&](const std::vector<at::Tensor>& x) {
    TensorTree p = params;
    p.set(name, x[0]);
    return std::vector<at::Tensor>{gpt_forward(c, p, ids, ModelLayout::whole(64))};
  };
  // Scaled up so that attention is far from uniform and the derivatives are not small.
  const std::vector<at::Tensor> inputs{(params.at(name) * 40.0).detach().requires_grad_(true)};
  const checks::GradcheckResult first = checks::gradcheck(fn, inputs);
  EXPECT_TRUE(first.passed) << first.message;
  const checks::GradcheckResult second = checks::gradgradcheck(fn, inputs);
  EXPECT_TRUE(second.passed) << second.message;
}

}  // namespace
}  // namespace magic
