// cross_entropy_rows (lib/model/cross_entropy_rows.h) against log_softmax and gather, whose
// derivatives LibTorch forms independently: the value, the gradient and its derivative (REPLAY's
// product: in blocks of rows, and as whole-size ops under grad mode) to rounding in fp64 and fp32,
// with and without label smoothing; the first three orders
// against finite differences; log_softmax itself where the function does not apply.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "checks/gradcheck.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/model/cross_entropy_rows.h"
#include "tests/support.h"

namespace magic {
namespace {

using LossFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, double)>;

// The composition the function replaces, as position_losses formed it before.
at::Tensor by_log_softmax(const at::Tensor& z, const at::Tensor& t, double eps) {
  const at::Tensor log_probs = at::log_softmax(z, -1);
  const at::Tensor loss = -log_probs.gather(-1, t.unsqueeze(-1)).squeeze(-1);
  if (eps == 0.0) return loss;
  return (1.0 - eps) * loss - (eps / static_cast<double>(z.size(-1))) * log_probs.sum(-1);
}

const LossFn ours = [](const at::Tensor& z, const at::Tensor& t, double eps) { return cross_entropy_rows(z, t, eps); };

struct Problem {
  at::Tensor z, t;
};

// [3, 5] rows of 11 classes by default, spread wide enough that some probabilities are tiny.
Problem problem(at::ScalarType dtype, uint64_t seed, std::vector<int64_t> sizes = {3, 5, 11}) {
  auto gen = make_generator(seed);
  const int64_t V = sizes.back();
  at::Tensor z = (at::randn(sizes, gen, at::TensorOptions().dtype(dtype)) * 4.0).requires_grad_(true);
  sizes.pop_back();
  return {z, at::randint(0, V, sizes, gen, at::TensorOptions().dtype(at::kLong))};
}

// The value, the gradient of ⟨ℓ, w⟩ and its derivative along a cotangent u of that gradient,
// with respect to z and to w (the rows' incoming gradient, as REPLAY's product takes it).
struct Orders {
  at::Tensor value, first, second_z, second_w;
};

// The second order taken without a graph (blocks of rows) and, with `graph`, with one (whole-size ops).
Orders orders(const LossFn& fn, const Problem& p, double eps, uint64_t seed, bool graph = false) {
  auto gen = make_generator(seed);
  const at::Tensor loss = fn(p.z, p.t, eps);
  const at::Tensor w = at::randn(loss.sizes(), gen, loss.options()).requires_grad_(true);
  const at::Tensor first = torch::autograd::grad({loss}, {p.z}, {w}, true, true)[0];
  const at::Tensor u = at::randn(first.sizes(), gen, first.options());
  const auto second = torch::autograd::grad({first}, {p.z, w}, {u}, graph, graph);
  return {loss.detach(), first.detach(), second[0].detach(), second[1].detach()};
}

TEST(CrossEntropyRows, ValueAndTwoDerivativesEqualLogSoftmaxAndGather) {
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    const double tolerance = dtype == at::kDouble ? 1e-13 : 1e-5;
    // The second shape takes its product in two blocks of rows (48 and 22).
    for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{3, 5, 11}, std::vector<int64_t>{70, 9, 300}}) {
      for (const double eps : {0.0, 0.1}) {
        const Problem p = problem(dtype, 1, sizes);
        const Orders a = orders(ours, p, eps, 2), b = orders(by_log_softmax, p, eps, 2),
                     c = orders(ours, p, eps, 2, /*graph=*/true);
        const std::string at = str_cat(dtype, " ", sizes[0], " rows, ε ", eps);
        EXPECT_LE(testing::relative_error(a.value, b.value), tolerance) << at;
        EXPECT_LE(testing::relative_error(a.first, b.first), tolerance) << at;
        EXPECT_LE(testing::relative_error(a.second_z, b.second_z), tolerance) << at;
        EXPECT_LE(testing::relative_error(a.second_w, b.second_w), tolerance) << at;
        EXPECT_LE(testing::relative_error(c.second_z, b.second_z), tolerance) << at << " (ops)";
        EXPECT_LE(testing::relative_error(c.second_w, b.second_w), tolerance) << at << " (ops)";
      }
    }
  }
}

TEST(CrossEntropyRows, PassesGradcheckAndGradgradcheck) {
  for (const double eps : {0.0, 0.2}) {
    const Problem p = problem(at::kDouble, 3);
    const at::Tensor z = (p.z.detach() / 4.0).requires_grad_(true);
    auto fn = [&](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{ours(x[0], p.t, eps)}; };
    const checks::GradcheckResult first = checks::gradcheck(fn, {z});
    EXPECT_TRUE(first.passed) << first.message;
    const checks::GradcheckResult second = checks::gradgradcheck(fn, {z});
    EXPECT_TRUE(second.passed) << second.message;
    EXPECT_GT(second.compared, 0);
  }
}

// The third order: gradgradcheck of the gradient g·(p − c) in (z, g), REPLAY's traced backward.
TEST(CrossEntropyRows, ItsGradientPassesGradgradcheck) {
  const Problem p = problem(at::kDouble, 5);
  const at::Tensor z = (p.z.detach() / 4.0).requires_grad_(true);
  auto gen = make_generator(6);
  const at::Tensor g = at::randn({3, 5}, gen, z.options()).requires_grad_(true);
  // The checker evaluates fn on perturbed copies too (no graph to them): leaves of their own then.
  auto fn = [&](const std::vector<at::Tensor>& v) {
    at::AutoGradMode grad_mode(true);
    std::vector<at::Tensor> leaves = v;
    for (at::Tensor& t : leaves) {
      if (!t.requires_grad()) t = t.detach().requires_grad_(true);
    }
    const at::Tensor loss = ours(leaves[0], p.t, 0.1);
    return torch::autograd::grad({loss}, {leaves[0]}, {leaves[1]}, true, true);
  };
  const checks::GradcheckResult third = checks::gradgradcheck(fn, {z, g});
  EXPECT_TRUE(third.passed) << third.message;
  EXPECT_GT(third.compared, 0);
}

TEST(CrossEntropyRows, IsLogSoftmaxAndGatherWhereItDoesNotApply) {
  const Problem p = problem(at::kDouble, 7);
  const at::Tensor z = p.z.detach().to(at::kBFloat16);
  for (const double eps : {0.0, 0.1}) {
    EXPECT_TRUE(at::equal(cross_entropy_rows(z, p.t, eps), by_log_softmax(z, p.t, eps))) << eps;
  }
}

}  // namespace
}  // namespace magic
