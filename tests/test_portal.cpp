// Portals across two real Gloo ranks (threads): rank 0 computes a = 3 sin(x) and sends it, rank 1
// receives it and computes Σ cos(a)·a. With L = Σ a² + Σ cos(a)·a, rank 0's first derivative and
// Hessian-vector product must equal the same math in one process, which needs the cotangents to
// cross back (first order) and the second-order cotangents to cross both ways. Both with
// per-transfer wire tags and with every wire tag 0 (matching by order alone, as on NCCL).
// portal_recv_all: several sources at once, the same derivatives.
// A portal that one side never reaches fails within the timeout, naming the portal, the phase
// and both ranks.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <thread>

#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/distributed/pools/portal.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/distributed/runtime/runtime.h"
#include "tests/support.h"

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

class PortalTagModes : public ::testing::TestWithParam<dist::PortalTags> {};

TEST_P(PortalTagModes, FirstAndSecondDerivativesCrossRanks) {
  testing::PortalTagsGuard mode(GetParam());
  // One process: ∇L and H v.
  at::Tensor x = input().requires_grad_(true);
  at::Tensor a = 3 * x.sin();
  at::Tensor total = (a * a).sum() + (a.cos() * a).sum();
  at::Tensor g = torch::autograd::grad({total}, {x}, {}, true, true)[0];
  const at::Tensor expected_grad = g.detach();
  const at::Tensor expected_hvp = torch::autograd::grad({(g * direction()).sum()}, {x})[0];
  const dist::PortalId id{"a", 8};

  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    const dist::Group& world = *rt.world();
    if (rt.rank() == 0) {
      at::Tensor x0 = input().requires_grad_(true);
      at::Tensor a0 = 3 * x0.sin();
      const at::Tensor token = dist::portal_send(a0, world, 1, id);
      const at::Tensor loss = (a0 * a0).sum() + token;
      at::Tensor g0 = torch::autograd::grad({loss}, {x0}, {}, true, true)[0];
      g0 = g0 + 0.0 * token;  // what differentiates g0 again reaches the portal (see portal.h)
      EXPECT_TRUE(at::allclose(g0, expected_grad, 1e-13, 1e-13));
      const at::Tensor hvp = torch::autograd::grad({(g0 * direction()).sum()}, {x0})[0];
      EXPECT_TRUE(at::allclose(hvp, expected_hvp, 1e-12, 1e-12)) << hvp << expected_hvp;
      dist::wait_portal_sends(world);
    } else {
      at::Tensor sync = at::zeros({}, at::kDouble).requires_grad_(true);
      const at::Tensor y = dist::portal_recv(sync, {5}, world, 0, id);
      const at::Tensor loss = (y.cos() * y).sum();
      const at::Tensor g_sync = torch::autograd::grad({loss}, {sync}, {}, true, true)[0];
      EXPECT_EQ(g_sync.item<double>(), 0.0);          // the anchor's gradient is a zero that carries the graph
      torch::autograd::grad({0.0 * g_sync}, {sync});  // the second-order pass, on this side
      dist::wait_portal_sends(world);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WireTags, PortalTagModes,
                         ::testing::Values(dist::PortalTags::kPerTransfer, dist::PortalTags::kZero),
                         [](const auto& info) {
                           return info.param == dist::PortalTags::kZero ? std::string("Zero")
                                                                        : std::string("PerTransfer");
                         });

// portal_recv_all: ranks 0 and 1 send a0 = 3 sin(x0) (5 values) and a1 = 2 cos(x1) (3 values);
// rank 2 posts both receives, listing rank 1 first, and computes Σ cos(y0)·y0 + Σ sin(y1)·y1. Each
// sender's gradient and Hessian-vector product must equal its part of the same math in one
// process (a receive matched to the wrong source has the wrong shape or the wrong function).
TEST(PortalRecvAll, ReceivesFromEverySourceAtOnceAndDifferentiatesTwice) {
  const auto x_of = [](int r) { return r == 0 ? input() : 0.5 * input().narrow(0, 0, 3); };
  const auto sent = [](int r, const at::Tensor& x) { return r == 0 ? 3 * x.sin() : 2 * x.cos(); };
  const auto far_loss = [](int r, const at::Tensor& y) { return r == 0 ? (y.cos() * y).sum() : (y.sin() * y).sum(); };
  std::vector<at::Tensor> expected_grad, expected_hvp;
  for (int r = 0; r < 2; ++r) {
    at::Tensor x = x_of(r).requires_grad_(true);
    const at::Tensor a = sent(r, x);
    const at::Tensor g = torch::autograd::grad({(a * a).sum() + far_loss(r, a)}, {x}, {}, true, true)[0];
    expected_grad.push_back(g.detach());
    expected_hvp.push_back(torch::autograd::grad({(g * direction().narrow(0, 0, x.numel())).sum()}, {x})[0]);
  }
  const dist::PortalId id{"a", 8};
  dist::run_ranks_in_threads(3, [&](dist::Runtime& rt) {
    const dist::Group& world = *rt.world();
    const int r = rt.rank();
    if (r < 2) {
      at::Tensor x = x_of(r).requires_grad_(true);
      const at::Tensor a = sent(r, x);
      const at::Tensor token = dist::portal_send(a, world, 2, id);
      at::Tensor g = torch::autograd::grad({(a * a).sum() + token}, {x}, {}, true, true)[0];
      g = g + 0.0 * token;
      EXPECT_TRUE(at::allclose(g, expected_grad[r], 1e-13, 1e-13)) << "rank " << r;
      const at::Tensor hvp = torch::autograd::grad({(g * direction().narrow(0, 0, x.numel())).sum()}, {x})[0];
      EXPECT_TRUE(at::allclose(hvp, expected_hvp[r], 1e-12, 1e-12)) << "rank " << r << hvp << expected_hvp[r];
      dist::wait_portal_sends(world);
    } else {
      at::Tensor sync = at::zeros({}, at::kDouble).requires_grad_(true);
      const std::vector<at::Tensor> y = dist::portal_recv_all(sync, {{1, {3}}, {0, {5}}}, world, id);
      ASSERT_EQ(y.size(), 2u);
      const at::Tensor loss = far_loss(1, y[0]) + far_loss(0, y[1]);
      const at::Tensor g_sync = torch::autograd::grad({loss}, {sync}, {}, true, true)[0];
      torch::autograd::grad({0.0 * g_sync}, {sync});
      dist::wait_portal_sends(world);
    }
  });
}

TEST(PortalRecvAll, ASourceThatNeverSendsIsNamedWhileAnotherReceiveIsStillPosted) {
  std::string error;
  dist::run_ranks_in_threads(
      3,
      [&](dist::Runtime& rt) {
        dist::set_phase("training step 1");
        const dist::Group& world = *rt.world();
        const dist::PortalId id{"components", 16};
        try {
          if (rt.rank() == 0) {
            at::Tensor sync = at::zeros({}, at::kDouble).requires_grad_(true);
            dist::portal_recv_all(sync, {{2, {4}}, {1, {4}}}, world, id);  // rank 2 never sends
          } else if (rt.rank() == 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(500));  // arrives while rank 0 waits for 2
            dist::portal_send(at::ones({4}, at::kDouble), world, 0, id);
            dist::wait_portal_sends(world);
          } else {
            std::this_thread::sleep_for(std::chrono::seconds(3));
          }
        } catch (const DistributedError& e) {
          if (rt.rank() == 0) error = e.what();
        }
      },
      std::chrono::seconds(2));
  EXPECT_NE(error.find("portal 'components' (training step 1, derivative order 0)"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 0 waited for rank 2, which never sent"), std::string::npos) << error;
}

// Rank `skipper` never reaches the portal; the other rank's error, within the timeout.
std::string error_when_one_side_skips(bool receiver_skips) {
  std::string error;
  const auto started = std::chrono::steady_clock::now();
  dist::run_ranks_in_threads(
      2,
      [&](dist::Runtime& rt) {
        dist::set_phase("training step 3");
        const dist::Group& world = *rt.world();
        const dist::PortalId id{"gates", 24};
        try {
          if (rt.rank() == 0 && !receiver_skips) {
            at::Tensor sync = at::zeros({}, at::kDouble).requires_grad_(true);
            dist::portal_recv(sync, {4}, world, 1, id);
          } else if (rt.rank() == 1 && receiver_skips) {
            dist::portal_send(at::ones({4}, at::kDouble), world, 0, id);
            dist::wait_portal_sends(world);
          } else {
            std::this_thread::sleep_for(std::chrono::seconds(3));  // alive, elsewhere, past the timeout
          }
        } catch (const DistributedError& e) {
          error = e.what();
        }
      },
      std::chrono::seconds(2));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  return error;
}

TEST(PortalSkipped, AReceiveWhoseSenderNeverComesNamesThePortalThePhaseAndBothRanks) {
  const std::string error = error_when_one_side_skips(false);
  EXPECT_NE(error.find("portal 'gates' (training step 3, derivative order 0)"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 0 waited for rank 1, which never sent"), std::string::npos) << error;
}

TEST(PortalSkipped, ASendWhoseReceiverNeverComesNamesThePortalThePhaseAndBothRanks) {
  const std::string error = error_when_one_side_skips(true);
  EXPECT_NE(error.find("portal 'gates' (training step 3, derivative order 0)"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1 sent to rank 0, which never received it"), std::string::npos) << error;
}

}  // namespace
}  // namespace magic
