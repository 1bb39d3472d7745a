// Portals across two real Gloo ranks (threads): rank 0 computes a = 3 sin(x) and sends it, rank 1
// receives it and computes Σ cos(a)·a. With L = Σ a² + Σ cos(a)·a, rank 0's first derivative and
// Hessian-vector product must equal the same math in one process, which needs the cotangents to
// cross back (first order) and the second-order cotangents to cross both ways.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/seed.h"
#include "lib/dist/portal.h"
#include "lib/dist/runtime.h"

namespace magic {
namespace {

at::Tensor input() {
  auto gen = make_generator(21);
  return at::randn({5}, gen, at::TensorOptions().dtype(at::kDouble));
}

at::Tensor direction() {
  auto gen = make_generator(22);
  return at::randn({5}, gen, at::TensorOptions().dtype(at::kDouble));
}

TEST(Portal, FirstAndSecondDerivativesCrossRanks) {
  // One process: ∇L and H v.
  at::Tensor x = input().requires_grad_(true);
  at::Tensor a = 3 * x.sin();
  at::Tensor total = (a * a).sum() + (a.cos() * a).sum();
  at::Tensor g = torch::autograd::grad({total}, {x}, {}, true, true)[0];
  const at::Tensor expected_grad = g.detach();
  const at::Tensor expected_hvp = torch::autograd::grad({(g * direction()).sum()}, {x})[0];

  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    const dist::Group& world = *rt.world();
    if (rt.rank() == 0) {
      at::Tensor x0 = input().requires_grad_(true);
      at::Tensor a0 = 3 * x0.sin();
      const at::Tensor token = dist::portal_send(a0, world, 1, 0);
      const at::Tensor loss = (a0 * a0).sum() + token;
      at::Tensor g0 = torch::autograd::grad({loss}, {x0}, {}, true, true)[0];
      g0 = g0 + 0.0 * token;  // what differentiates g0 again reaches the portal (see portal.h)
      EXPECT_TRUE(at::allclose(g0, expected_grad, 1e-13, 1e-13));
      const at::Tensor hvp = torch::autograd::grad({(g0 * direction()).sum()}, {x0})[0];
      EXPECT_TRUE(at::allclose(hvp, expected_hvp, 1e-12, 1e-12)) << hvp << expected_hvp;
      dist::wait_portal_sends();
    } else {
      at::Tensor sync = at::zeros({}, at::kDouble).requires_grad_(true);
      const at::Tensor y = dist::portal_recv(sync, {5}, world, 0, 0);
      const at::Tensor loss = (y.cos() * y).sum();
      const at::Tensor g_sync = torch::autograd::grad({loss}, {sync}, {}, true, true)[0];
      EXPECT_EQ(g_sync.item<double>(), 0.0);          // the anchor's gradient is a zero that carries the graph
      torch::autograd::grad({0.0 * g_sync}, {sync});  // the second-order pass, on this side
      dist::wait_portal_sends();
    }
  });
}

}  // namespace
}  // namespace magic
