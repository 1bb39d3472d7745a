// gelu_erf (lib/model/gelu.h) against at::gelu, the independent oracle: the same values to erf's
// few ulp, the same first and second derivatives (to rounding), and gradcheck / gradgradcheck
// against finite differences.
#include <gtest/gtest.h>

#include <limits>

#include <torch/csrc/autograd/autograd.h>

#include "checks/gradcheck.h"
#include "lib/core/seed.h"
#include "lib/model/gelu.h"

namespace magic {
namespace {

at::Tensor input(at::ScalarType dtype, uint64_t seed) {
  auto gen = make_generator(seed);
  // Spread over the tails too; 1000 entries leave a tail past any vector width.
  return (at::randn({1000}, gen, at::TensorOptions().dtype(at::kDouble)) * 3.0).to(dtype);
}

// Φ = (1 + erf)/2 is off by at most erf's error, a few ulp of 1, so x·Φ by that times |x|.
TEST(Gelu, ValuesAreAtGelusToAFewUlpInFp64) {
  const at::Tensor x = input(at::kDouble, 1);
  const double eps = std::numeric_limits<double>::epsilon();
  const at::Tensor off = (gelu_erf(x) - at::gelu(x)).abs() - 4 * eps * x.abs();
  EXPECT_LE(off.max().item<double>(), 0.0);
}

// First derivative along v and the second derivative (u·H) of <v, gelu(x)>, both ways.
TEST(Gelu, FirstAndSecondDerivativesAreAtGelus) {
  const at::Tensor x0 = input(at::kDouble, 2);
  auto gen = make_generator(3);
  const at::Tensor v = at::randn({1000}, gen, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor u = at::randn({1000}, gen, at::TensorOptions().dtype(at::kDouble));
  std::vector<at::Tensor> first, second;
  for (bool ours : {true, false}) {
    const at::Tensor x = x0.clone().requires_grad_(true);
    const at::Tensor y = ours ? gelu_erf(x) : at::gelu(x);
    const at::Tensor g = torch::autograd::grad({y}, {x}, {v}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    first.push_back(g.detach());
    second.push_back(torch::autograd::grad({g}, {x}, {u})[0]);
  }
  EXPECT_TRUE(at::allclose(first[0], first[1], 1e-14, 1e-15));
  EXPECT_TRUE(at::allclose(second[0], second[1], 1e-13, 1e-14));
  EXPECT_GT(second[1].abs().max().item<double>(), 0.1);  // the second derivative is not trivially zero
}

TEST(Gelu, PassesGradcheckAndGradgradcheck) {
  auto fn = [](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{gelu_erf(x[0])}; };
  const std::vector<at::Tensor> inputs{input(at::kDouble, 4).slice(0, 0, 12).clone().requires_grad_(true)};
  const checks::GradcheckResult first = checks::gradcheck(fn, inputs);
  EXPECT_TRUE(first.passed) << first.message;
  const checks::GradcheckResult second = checks::gradgradcheck(fn, inputs);
  EXPECT_TRUE(second.passed) << second.message;
}

}  // namespace
}  // namespace magic
