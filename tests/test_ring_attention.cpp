// Ring attention (lib/distributed/parallel/ring_attention.h) on cp ranks as threads, each holding
// its zig-zag columns of q, k and v, against causal attention over the whole sequence in one
// process: the outputs at each rank's columns, the gradients of each rank's q, k and v (the keys'
// and values' gathered from every rank's queries through the ring's backward), and the
// Hessian-vector product, all at fp64. cp = 1, 2, 3 and 4 (the fourth with a padded column).
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <functional>
#include <limits>
#include <mutex>

#include "lib/core/seed.h"
#include "lib/distributed/parallel/context_parallel.h"
#include "lib/distributed/parallel/ring_attention.h"
#include "lib/distributed/runtime/runtime.h"
#include "tests/support.h"

namespace magic {
namespace {

constexpr int64_t kB = 2, kH = 2, kD = 3;

struct Whole {
  at::Tensor q, k, v, w, dq, dk, dv;  // [B, H, P, D]; w the loss's weights, d* the HVP's directions
};

Whole whole_problem(int64_t padded) {
  at::Generator gen = make_generator(31);
  auto draw = [&] { return at::randn({kB, kH, padded, kD}, gen, at::kDouble); };
  return {draw(), draw(), draw(), draw(), draw(), draw(), draw()};
}

// Σ y ⊙ w + 0.1 Σ y²: a loss with a second derivative in y too.
at::Tensor loss_of(const at::Tensor& y, const at::Tensor& w) {
  return (y * w).sum() + 0.1 * (y * y).sum();
}

struct Derivatives {
  at::Tensor y;
  std::vector<at::Tensor> grad, hvp;  // q, k, v
};

Derivatives single_process(const Whole& p) {
  std::vector<at::Tensor> leaves = {p.q.clone().requires_grad_(true), p.k.clone().requires_grad_(true),
                                    p.v.clone().requires_grad_(true)};
  const int64_t P = p.q.size(2);
  const at::Tensor positions = at::arange(P, at::kLong);
  const at::Tensor future = positions.unsqueeze(0) > positions.unsqueeze(1);
  const at::Tensor scores = at::matmul(leaves[0], leaves[1].transpose(-2, -1)) +
                            at::where(future, -std::numeric_limits<double>::infinity(), 0.0);
  Derivatives d;
  d.y = at::matmul(at::softmax(scores, -1), leaves[2]);
  d.grad = torch::autograd::grad({loss_of(d.y, p.w)}, leaves, {}, true, true);
  const at::Tensor gv = (d.grad[0] * p.dq).sum() + (d.grad[1] * p.dk).sum() + (d.grad[2] * p.dv).sum();
  d.hvp = torch::autograd::grad({gv}, leaves);
  for (auto& g : d.grad) g = g.detach();
  d.y = d.y.detach();
  return d;
}

// One rank's columns of the whole problem and its ring attention's output, leaves q, k, v.
struct OnRank {
  std::function<at::Tensor(const at::Tensor&)> mine;  // this rank's columns of a whole tensor
  std::vector<at::Tensor> leaves;
  at::Tensor y;
};

OnRank ring_on_rank(const Whole& p, int cp, const dist::Runtime& rt, dist::RingShift shift = dist::shift_ring) {
  const int64_t P = p.q.size(2);
  const at::Tensor columns = dist::zigzag_columns(P, cp, rt.rank());
  OnRank o;
  o.mine = [columns](const at::Tensor& t) { return t.index_select(2, columns); };
  o.leaves = {o.mine(p.q).requires_grad_(true), o.mine(p.k).requires_grad_(true), o.mine(p.v).requires_grad_(true)};
  o.y = dist::ring_attention(o.leaves[0], o.leaves[1], o.leaves[2], columns, columns,
                             cp > 1 ? rt.world().get() : nullptr, dist::RingSteps{shift, dist::block_product});
  return o;
}

class RingAttention : public ::testing::TestWithParam<std::tuple<int, int64_t>> {};

TEST_P(RingAttention, EveryRanksColumnsGetTheWholeSequencesOutputGradientAndHvp) {
  const auto [cp, length] = GetParam();
  const int64_t P = dist::cp_padded_length(length, cp);
  const Whole p = whole_problem(P);
  const Derivatives expected = single_process(p);
  std::mutex mutex;
  int ranks_checked = 0;
  dist::run_ranks_in_threads(cp, [&](dist::Runtime& rt) {
    const auto [mine, leaves, y] = ring_on_rank(p, cp, rt);
    const auto grad = torch::autograd::grad({loss_of(y, mine(p.w))}, leaves, {}, true, true);
    const at::Tensor gv = (grad[0] * mine(p.dq)).sum() + (grad[1] * mine(p.dk)).sum() + (grad[2] * mine(p.dv)).sum();
    const auto hvp = torch::autograd::grad({gv}, leaves);
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_LT(testing::relative_error(y, mine(expected.y)), 1e-13) << "rank " << rt.rank();
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_LT(testing::relative_error(grad[i], mine(expected.grad[i])), 1e-12) << "rank " << rt.rank() << " "
                                                                                 << "qkv"[i];
      EXPECT_LT(testing::relative_error(hvp[i], mine(expected.hvp[i])), 1e-11) << "rank " << rt.rank() << " "
                                                                               << "qkv"[i];
    }
    ++ranks_checked;
  });
  EXPECT_EQ(ranks_checked, cp);
}

// Planted: the ring's dK/dV sent onward instead of back to their owners (cp = 3). The output is
// right and the queries' gradients too; the keys' and values' are not.
TEST(RingAttentionPlanted, DkDvThatDoNotReturnToTheirOwnersAreWrong) {
  const int cp = 3;
  const int64_t P = dist::cp_padded_length(12, cp);
  const Whole p = whole_problem(P);
  const Derivatives expected = single_process(p);
  std::mutex mutex;
  int wrong_keys = 0;
  dist::run_ranks_in_threads(cp, [&](dist::Runtime& rt) {
    const auto [mine, leaves, y] = ring_on_rank(p, cp, rt, dist::shift_ring_cotangent_onward);
    const auto grad = torch::autograd::grad({loss_of(y, mine(p.w))}, leaves);
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_LT(testing::relative_error(y, mine(expected.y)), 1e-13);
    EXPECT_LT(testing::relative_error(grad[0], mine(expected.grad[0])), 1e-12);
    if (testing::relative_error(grad[1], mine(expected.grad[1])) > 1e-3) ++wrong_keys;
  });
  EXPECT_EQ(wrong_keys, cp)
      << "every rank's keys are seen by another rank's queries (its chunk r is before chunk 2cp − 1 − r of every rank)";
}

INSTANTIATE_TEST_SUITE_P(Rings, RingAttention,
                         ::testing::Values(std::make_tuple(1, 6), std::make_tuple(2, 8), std::make_tuple(3, 12),
                                           std::make_tuple(4, 15)));

}  // namespace
}  // namespace magic
