// The differentiable collectives across real Gloo ranks (threads of this process): first
// derivatives and Hessian-vector products on every rank equal the same math done on the
// concatenated tensors in one process, and the lockstep finite-difference gradcheck agrees at
// both orders (shift_ring, the ring step, included). The two planted variants of copy_to_group
// keep first derivatives right and break second derivatives, as the mutations they stand for
// must; the planted ring step that sends its cotangents onward breaks the first derivatives.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "checks/rank_gradcheck.h"
#include "lib/core/seed.h"
#include "lib/distributed/collectives/collectives.h"
#include "lib/distributed/runtime/runtime.h"

namespace magic {
namespace {

using checks::RankSemantics;
using dist::Group;

at::Tensor rank_input(int rank, int size, uint64_t salt) {
  auto gen = make_generator(derive_seed(salt, "collective-input", rank));
  return at::randn({size, 2}, gen, at::TensorOptions().dtype(at::kDouble));
}

double coefficient(int rank) {
  return 0.3 * (rank + 1);
}

struct CollectiveCase {
  std::string name;
  RankSemantics semantics;
  // This rank's term, through the collective under test.
  std::function<at::Tensor(const at::Tensor& x, const Group& g)> local;
  // The global function from all ranks' inputs, in one process.
  std::function<at::Tensor(const std::vector<at::Tensor>& xs)> global;
};

std::vector<CollectiveCase> cases(int size) {
  auto sum_all = [](const std::vector<at::Tensor>& xs) { return at::stack(xs).sum(0); };
  std::vector<CollectiveCase> out;
  out.push_back({"all_reduce_sum", RankSemantics::kDistinctTerms,
                 [](const at::Tensor& x, const Group& g) {
                   return (coefficient(g.rank()) * dist::all_reduce_sum(x, g).sin()).sum();
                 },
                 [=](const std::vector<at::Tensor>& xs) {
                   at::Tensor total = at::zeros({}, at::kDouble);
                   for (int r = 0; r < size; ++r) total = total + (coefficient(r) * sum_all(xs).sin()).sum();
                   return total;
                 }});
  out.push_back({"reduce_from_group", RankSemantics::kReplicatedOutput,
                 [](const at::Tensor& x, const Group& g) { return dist::reduce_from_group(x, g).pow(3).sin().sum(); },
                 [=](const std::vector<at::Tensor>& xs) { return sum_all(xs).pow(3).sin().sum(); }});
  out.push_back({"copy_to_group", RankSemantics::kReplicatedInput,
                 [](const at::Tensor& x, const Group& g) {
                   return (dist::copy_to_group(x, g) * coefficient(g.rank())).sin().pow(2).sum();
                 },
                 [=](const std::vector<at::Tensor>& xs) {
                   at::Tensor total = at::zeros({}, at::kDouble);
                   for (int r = 0; r < size; ++r) total = total + (xs[0] * coefficient(r)).sin().pow(2).sum();
                   return total;
                 }});
  out.push_back({"all_gather", RankSemantics::kDistinctTerms,
                 [](const at::Tensor& x, const Group& g) {
                   return (coefficient(g.rank()) * dist::all_gather(x, g, 1).sin() * dist::all_gather(x, g, 1)).sum();
                 },
                 [=](const std::vector<at::Tensor>& xs) {
                   at::Tensor gathered = at::cat(xs, 1), total = at::zeros({}, at::kDouble);
                   for (int r = 0; r < size; ++r) total = total + (coefficient(r) * gathered.sin() * gathered).sum();
                   return total;
                 }});
  out.push_back({"reduce_scatter_sum", RankSemantics::kDistinctTerms,
                 [](const at::Tensor& x, const Group& g) {
                   return (coefficient(g.rank()) * dist::reduce_scatter_sum(x, g, 0).pow(3)).sum();
                 },
                 [=](const std::vector<at::Tensor>& xs) {
                   at::Tensor total = at::zeros({}, at::kDouble);
                   for (int r = 0; r < size; ++r)
                     total = total + (coefficient(r) * sum_all(xs).narrow(0, r, 1).pow(3)).sum();
                   return total;
                 }});
  out.push_back({"gather_from_group", RankSemantics::kReplicatedOutput,
                 [](const at::Tensor& x, const Group& g) {
                   const at::Tensor all = dist::gather_from_group(x, g, 0);
                   return (all.sin() * all.roll(1, 0)).sum();
                 },
                 [=](const std::vector<at::Tensor>& xs) {
                   const at::Tensor all = at::cat(xs, 0);
                   return (all.sin() * all.roll(1, 0)).sum();
                 }});
  out.push_back({"split_to_group", RankSemantics::kReplicatedInput,
                 [](const at::Tensor& x, const Group& g) {
                   return (coefficient(g.rank()) * dist::split_to_group(x, g, 0).pow(3)).sum();
                 },
                 [=](const std::vector<at::Tensor>& xs) {
                   at::Tensor total = at::zeros({}, at::kDouble);
                   for (int r = 0; r < size; ++r) total = total + (coefficient(r) * xs[0].narrow(0, r, 1).pow(3)).sum();
                   return total;
                 }});
  // Two ring steps of different offsets: member r sees sin(x) of member r − 1 and x of r − 2.
  out.push_back({"shift_ring", RankSemantics::kDistinctTerms,
                 [](const at::Tensor& x, const Group& g) {
                   return (coefficient(g.rank()) * dist::shift_ring(x.sin(), g, 1) * dist::shift_ring(x, g, 2)).sum();
                 },
                 [=](const std::vector<at::Tensor>& xs) {
                   at::Tensor total = at::zeros({}, at::kDouble);
                   for (int r = 0; r < size; ++r) {
                     const at::Tensor& one_back = xs[static_cast<size_t>((r + size - 1) % size)];
                     const at::Tensor& two_back = xs[static_cast<size_t>((r + 2 * size - 2) % size)];
                     total = total + (coefficient(r) * one_back.sin() * two_back).sum();
                   }
                   return total;
                 }});
  return out;
}

struct Derivatives {
  std::vector<at::Tensor> grad, hvp;  // per rank (one entry for a replicated input)
};

// One process, no collectives: ∇F and H v with directions v.
Derivatives single_process(const CollectiveCase& c, const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& directions) {
  std::vector<at::Tensor> xs;
  for (const auto& x : inputs) xs.push_back(x.detach().clone().requires_grad_(true));
  auto grads = torch::autograd::grad({c.global(xs)}, xs, {}, true, true);
  at::Tensor s = at::zeros({}, at::kDouble);
  for (size_t i = 0; i < xs.size(); ++i) s = s + (grads[i] * directions[i]).sum();
  auto hvps = torch::autograd::grad({s}, xs);
  Derivatives d;
  for (size_t i = 0; i < xs.size(); ++i) {
    d.grad.push_back(grads[i].detach());
    d.hvp.push_back(hvps[i]);
  }
  return d;
}

// This rank's ∂F/∂x_r and (H v)_r through the collectives.
std::pair<at::Tensor, at::Tensor> on_rank(const std::function<at::Tensor(const at::Tensor&, const Group&)>& local,
                                          const Group& g, const at::Tensor& input, const at::Tensor& direction) {
  at::Tensor x = input.detach().clone().requires_grad_(true);
  at::Tensor grad = torch::autograd::grad({local(x, g)}, {x}, {}, true, true)[0];
  at::Tensor hvp = torch::autograd::grad({(grad * direction).sum()}, {x})[0];
  return {grad.detach(), hvp};
}

std::vector<at::Tensor> inputs_for(const CollectiveCase& c, int size, uint64_t salt) {
  std::vector<at::Tensor> xs;
  const int n = c.semantics == RankSemantics::kReplicatedInput ? 1 : size;
  for (int r = 0; r < n; ++r) xs.push_back(rank_input(r, size, salt));
  return xs;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, DerivativesOfEveryOrderMatchOneProcess) {
  const int size = GetParam();
  for (const auto& c : cases(size)) {
    const auto inputs = inputs_for(c, size, 1), directions = inputs_for(c, size, 2);
    const Derivatives expected = single_process(c, inputs, directions);
    dist::run_ranks_in_threads(size, [&](dist::Runtime& rt) {
      const int r = rt.rank();
      const size_t own = c.semantics == RankSemantics::kReplicatedInput ? 0 : r;
      auto [grad, hvp] = on_rank(c.local, *rt.world(), inputs[own], directions[own]);
      EXPECT_TRUE(at::allclose(grad, expected.grad[own], 1e-12, 1e-12)) << c.name << " gradient on rank " << r;
      EXPECT_TRUE(at::allclose(hvp, expected.hvp[own], 1e-12, 1e-12)) << c.name << " HVP on rank " << r;
    });
  }
}

TEST_P(Collectives, LockstepFiniteDifferencesAgreeAtBothOrders) {
  const int size = GetParam();
  for (const auto& c : cases(size)) {
    const auto inputs = inputs_for(c, size, 3);
    dist::run_ranks_in_threads(size, [&](dist::Runtime& rt) {
      const Group& g = *rt.world();
      auto local = [&](const at::Tensor& x) { return c.local(x, g); };
      for (bool second : {false, true}) {
        auto result = checks::rank_gradcheck(g, local, inputs, c.semantics, second);
        EXPECT_TRUE(result.passed) << c.name << (second ? " (second order): " : ": ") << result.message;
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4));

TEST(PlantedCollectives, AllReduceBackwardCountsTheReplicatedCotangentOncePerRank) {
  const int size = 3;
  const auto c = cases(size)[2];  // copy_to_group
  const auto inputs = inputs_for(c, size, 4), directions = inputs_for(c, size, 5);
  const Derivatives expected = single_process(c, inputs, directions);
  dist::run_ranks_in_threads(size, [&](dist::Runtime& rt) {
    const Group& g = *rt.world();
    auto variant = [](const at::Tensor& x, const Group& grp) {
      return (dist::copy_to_group_allreduce_backward(x, grp) * coefficient(grp.rank())).sin().pow(2).sum();
    };
    auto [grad, hvp] = on_rank(variant, g, inputs[0], directions[0]);
    EXPECT_TRUE(at::allclose(grad, expected.grad[0], 1e-12, 1e-12)) << "first derivatives stay right";
    EXPECT_TRUE(at::allclose(hvp, size * expected.hvp[0], 1e-12, 1e-12)) << "H v comes out size times too large";
    auto local = [&](const at::Tensor& x) { return variant(x, g); };
    EXPECT_TRUE(checks::rank_gradcheck(g, local, inputs, RankSemantics::kReplicatedInput, false).passed);
    auto second = checks::rank_gradcheck(g, local, inputs, RankSemantics::kReplicatedInput, true);
    EXPECT_FALSE(second.passed);
    EXPECT_NE(second.message.find("second derivative across 3 ranks"), std::string::npos) << second.message;
  });
}

// Three members: the cotangent of what member r received from r − 1 goes on to r + 1 instead of
// back to r − 1, so every member's gradient is another's; the gradcheck names it at first order.
TEST(PlantedCollectives, ARingStepWhoseCotangentsGoOnwardMisroutesTheGradients) {
  const int size = 3;
  const auto c = cases(size).back();  // shift_ring
  ASSERT_EQ(c.name, "shift_ring");
  const auto inputs = inputs_for(c, size, 8), directions = inputs_for(c, size, 9);
  const Derivatives expected = single_process(c, inputs, directions);
  dist::run_ranks_in_threads(size, [&](dist::Runtime& rt) {
    const Group& g = *rt.world();
    auto variant = [](const at::Tensor& x, const Group& grp) {
      return (coefficient(grp.rank()) * dist::shift_ring_cotangent_onward(x.sin(), grp, 1) *
              dist::shift_ring_cotangent_onward(x, grp, 2))
          .sum();
    };
    auto [grad, hvp] =
        on_rank(variant, g, inputs[static_cast<size_t>(g.rank())], directions[static_cast<size_t>(g.rank())]);
    EXPECT_FALSE(at::allclose(grad, expected.grad[static_cast<size_t>(g.rank())], 1e-6, 1e-6));
    auto local = [&](const at::Tensor& x) { return variant(x, g); };
    auto first = checks::rank_gradcheck(g, local, inputs, RankSemantics::kDistinctTerms, false);
    EXPECT_FALSE(first.passed);
    EXPECT_NE(first.message.find("across 3 ranks"), std::string::npos) << first.message;
  });
}

TEST(PlantedCollectives, DetachedReductionLosesCrossRankSecondOrderTerms) {
  // DDP-style: each rank differentiates its own term at the replicated x, then the gradient is
  // summed outside autograd. G(x) = Σ_r ∇f_r(x) is right; ∇<G, v> should be Σ_r H_r v.
  const int size = 3;
  const auto c = cases(size)[2];
  const auto inputs = inputs_for(c, size, 6), directions = inputs_for(c, size, 7);
  const Derivatives expected = single_process(c, inputs, directions);
  dist::run_ranks_in_threads(size, [&](dist::Runtime& rt) {
    const Group& g = *rt.world();
    at::Tensor x = inputs[0].clone().requires_grad_(true);
    at::Tensor f = (x * coefficient(g.rank())).sin().pow(2).sum();
    at::Tensor local_grad = torch::autograd::grad({f}, {x}, {}, true, true)[0];
    at::Tensor reduced = dist::all_reduce_sum_detached(local_grad, g);
    EXPECT_TRUE(at::allclose(reduced, expected.grad[0], 1e-12, 1e-12)) << "the value is the global gradient";
    at::Tensor hvp = torch::autograd::grad({(reduced * directions[0]).sum()}, {x})[0];
    EXPECT_FALSE(at::allclose(hvp, expected.hvp[0], 1e-6, 1e-6)) << "only this rank's H_r v survives";
    at::Tensor summed_hvp = hvp.clone();
    g.all_reduce_sum_(summed_hvp);
    EXPECT_TRUE(at::allclose(summed_hvp, expected.hvp[0], 1e-12, 1e-12)) << "each rank keeps exactly its own term";
  });
}

}  // namespace
}  // namespace magic
