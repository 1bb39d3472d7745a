// layer_norm_rows (lib/model/layer_norm.h) against at::layer_norm, whose second derivative LibTorch
// forms independently (layer_norm_double_backward): the value and gradient bit for bit, the second
// derivative to rounding both ways (the fused pass, and the differentiable ops), in fp64 and fp32,
// the same bits on one thread and two; and the first three orders against finite differences.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "checks/gradcheck.h"
#include "lib/core/seed.h"
#include "lib/model/layer_norm.h"
#include "tests/support.h"

namespace magic {
namespace {

using LayerNormFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

at::Tensor defined_or_zeros(const at::Tensor& g, const at::Tensor& like) {
  return g.defined() ? g.detach() : at::zeros_like(like).detach();
}

struct Inputs {
  at::Tensor x, gamma, beta;
};

Inputs inputs(at::ScalarType dtype, uint64_t seed) {
  auto gen = make_generator(seed);
  const auto o = at::TensorOptions().dtype(dtype);
  // 3 x 70 rows (more than one block of rows), of 24 features with an offset and a spread.
  return {(at::randn({3, 70, 24}, gen, o) * 3.0 + 1.5).requires_grad_(true),
          (at::randn({24}, gen, o) + 1.0).requires_grad_(true), at::randn({24}, gen, o).requires_grad_(true)};
}

// The value, the gradient of ⟨y, w⟩ and its derivative along (u_x, u_γ, u_β), with respect to
// (x, γ, β); the second order taken without a graph (the fused pass) and, with `graph`, with one
// (the differentiable ops).
struct Orders {
  at::Tensor y;
  std::vector<at::Tensor> first, second;
};

Orders orders(const LayerNormFn& fn, const Inputs& in, uint64_t seed, bool graph) {
  auto gen = make_generator(seed);
  const std::vector<at::Tensor> leaves{in.x, in.gamma, in.beta};
  const at::Tensor y = fn(in.x, in.gamma, in.beta);
  const at::Tensor w = at::randn(y.sizes(), gen, y.options());
  Orders o{y.detach(), {}, {}};
  const auto first = torch::autograd::grad({(y * w).sum()}, leaves, {}, true, true);
  at::Tensor along = at::zeros({}, y.options());
  for (const at::Tensor& g : first) {
    o.first.push_back(g.detach());
    along = along + (g * at::randn(g.sizes(), gen, g.options())).sum();
  }
  // β enters no derivative past the first: allowed unused, its derivatives zeros.
  const auto second = torch::autograd::grad({along}, leaves, {}, graph, graph, /*allow_unused=*/true);
  for (size_t i = 0; i < second.size(); ++i) o.second.push_back(defined_or_zeros(second[i], leaves[i]));
  return o;
}

const LayerNormFn ours = [](const at::Tensor& x, const at::Tensor& g, const at::Tensor& b) {
  return layer_norm_rows(x, g, b, 1e-5);
};
const LayerNormFn libtorch = [](const at::Tensor& x, const at::Tensor& g, const at::Tensor& b) {
  return at::layer_norm(x, {x.size(-1)}, g, b, 1e-5);
};

TEST(LayerNormRows, ValueAndTwoDerivativesEqualAtLayerNorm) {
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    const double tolerance = dtype == at::kDouble ? 1e-12 : 2e-5;
    const Inputs in = inputs(dtype, 1);
    const Orders a = orders(ours, in, 2, false), b = orders(libtorch, in, 2, false), c = orders(ours, in, 2, true);
    EXPECT_TRUE(at::equal(a.y, b.y)) << dtype;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(at::equal(a.first[i], b.first[i])) << dtype << " first derivative, input " << i;
      EXPECT_LE(testing::relative_error(a.second[i], b.second[i]), tolerance)
          << dtype << " second derivative, input " << i;
      EXPECT_LE(testing::relative_error(c.second[i], b.second[i]), tolerance)
          << dtype << " second derivative (ops), input " << i;
    }
  }
}

// REPLAY's product: the traced backward differentiated without a graph (the fused pass), against
// LibTorch's, for the cotangents of all three outputs of the backward.
TEST(LayerNormRows, TheFusedSecondDerivativeEqualsLibTorchsAndRepeatsOnTwoThreads) {
  const Inputs in = inputs(at::kDouble, 3);
  auto run = [&](const LayerNormFn& fn) {
    const std::vector<at::Tensor> leaves{in.x, in.gamma, in.beta};
    const at::Tensor y = fn(in.x, in.gamma, in.beta);
    auto gen = make_generator(4);
    const at::Tensor gy = at::randn(y.sizes(), gen, y.options());
    const auto first = torch::autograd::grad({y}, leaves, {gy}, true, true);
    std::vector<at::Tensor> cotangents;
    for (const at::Tensor& g : first) cotangents.push_back(at::randn(g.sizes(), gen, g.options()));
    // No graph: the fused pass. β enters no derivative past the first.
    std::vector<at::Tensor> out = torch::autograd::grad(first, leaves, cotangents, false, false, true);
    for (size_t i = 0; i < out.size(); ++i) out[i] = defined_or_zeros(out[i], leaves[i]);
    return out;
  };
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = run(ours), theirs = run(libtorch);
  at::set_num_threads(2);
  const auto two = run(ours);
  at::set_num_threads(threads);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LE(testing::relative_error(one[i], theirs[i]), 1e-12) << "input " << i;
    EXPECT_TRUE(at::equal(one[i], two[i])) << "input " << i;
  }
}

TEST(LayerNormRows, PassesGradcheckAndGradgradcheck) {
  const Inputs in = inputs(at::kDouble, 5);
  const std::vector<at::Tensor> small{in.x.detach().narrow(1, 0, 3).narrow(2, 0, 5).clone().requires_grad_(true),
                                      in.gamma.detach().narrow(0, 0, 5).clone().requires_grad_(true),
                                      in.beta.detach().narrow(0, 0, 5).clone().requires_grad_(true)};
  auto fn = [](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{ours(x[0], x[1], x[2])}; };
  const checks::GradcheckResult first = checks::gradcheck(fn, small);
  EXPECT_TRUE(first.passed) << first.message;
  const checks::GradcheckResult second = checks::gradgradcheck(fn, small);
  EXPECT_TRUE(second.passed) << second.message;
  EXPECT_GT(second.compared, 0);
}

// The third order against finite differences: gradgradcheck of the gradient itself. (Not against
// at::layer_norm: LibTorch 1.13's layer_norm_double_backward takes the forward's mean and rstd as
// constants, so its own derivative misses their dependence on x; the same check fails it, with
// 225 of 2025 entries off.)
TEST(LayerNormRows, ItsGradientPassesGradgradcheck) {
  const Inputs in = inputs(at::kDouble, 7);
  const at::Tensor x = in.x.detach().narrow(1, 0, 3).narrow(2, 0, 5).clone().requires_grad_(true);
  const at::Tensor g = in.gamma.detach().narrow(0, 0, 5).clone().requires_grad_(true);
  const at::Tensor b = in.beta.detach().narrow(0, 0, 5).clone();
  auto gen = make_generator(8);
  const at::Tensor w = at::randn(x.sizes(), gen, x.options());
  {
    // The checker evaluates fn on perturbed copies too (no graph to them): leaves of their own then.
    auto fn = [&](const std::vector<at::Tensor>& v) {
      at::AutoGradMode grad_mode(true);
      std::vector<at::Tensor> leaves = v;
      for (at::Tensor& t : leaves) {
        if (!t.requires_grad()) t = t.detach().requires_grad_(true);
      }
      const at::Tensor y = ours(leaves[0], leaves[1], b);
      return torch::autograd::grad({(y * w).sum()}, leaves, {}, true, true);
    };
    const checks::GradcheckResult second = checks::gradgradcheck(fn, {x, g});
    EXPECT_TRUE(second.passed) << second.message;
    EXPECT_GT(second.compared, 0);
  }
}

TEST(LayerNormRows, IsAtLayerNormWhereTheKernelsDoNotApply) {
  const Inputs in = inputs(at::kDouble, 6);
  const at::Tensor x = in.x.detach().to(at::kBFloat16), g = in.gamma.detach().to(at::kBFloat16),
                   b = in.beta.detach().to(at::kBFloat16);
  EXPECT_TRUE(at::equal(layer_norm_rows(x, g, b, 1e-5), at::layer_norm(x, {24}, g, b, 1e-5)));
  const at::Tensor y = layer_norm_rows(in.x, in.gamma, at::Tensor(), 1e-5);
  EXPECT_TRUE(at::equal(y, at::layer_norm(in.x, {24}, in.gamma, at::Tensor(), 1e-5)));
}

}  // namespace
}  // namespace magic
