// Gradient accumulation (lib/step/micro_batches.h): a rank's rows split contiguously into M parts
// whose sizes differ by at most one, and an LM step over M micro-batches that equals the
// full-batch step for any split (the loss is normalized by the whole batch's valid labels):
// gradient, HVP and the metagradient dQ/dw of a REPLAY-style vjp, at per-token weights.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/error.h"
#include "tests/support.h"

namespace magic {
namespace {

std::vector<int64_t> sizes(const std::vector<std::vector<int64_t>>& parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.push_back(static_cast<int64_t>(p.size()));
  return out;
}

TEST(MicroBatches, SplitTheRowsContiguouslyTheLargerFirst) {
  const std::vector<int64_t> rows{10, 11, 12, 13, 14, 15, 16};
  const auto parts = MicroBatches(3).split(rows);
  EXPECT_EQ(sizes(parts), (std::vector<int64_t>{3, 2, 2}));
  std::vector<int64_t> joined;
  for (const auto& p : parts) joined.insert(joined.end(), p.begin(), p.end());
  EXPECT_EQ(joined, rows);
  EXPECT_EQ(sizes(MicroBatches(4).split({1, 2, 3, 4})), (std::vector<int64_t>{1, 1, 1, 1}));
  // One micro-batch is the whole share, an empty one included (a rank beyond the batch's rows).
  EXPECT_EQ(sizes(MicroBatches(1).split({})), (std::vector<int64_t>{0}));
  try {
    MicroBatches(4).split({1, 2, 3});
    FAIL() << "3 rows in 4 micro-batches";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mb=4: a rank holds 3 rows"), std::string::npos) << e.what();
  }
}

LmProblem problem_in(int64_t micro_batches) {
  testing::TinyRun run;
  run.batch_size = 5;  // in 3 micro-batches: 2, 2, 1 rows of unequal label counts
  run.weights = "per_token";
  run.steps = 2;
  return build_lm_problem(testing::tiny_run_config(run), std::make_shared<SingleProcess>(), nullptr,
                          std::make_shared<MicroBatches>(micro_batches));
}

// At θ_0 of step 1, with w differentiable: the gradient g, the HVP ∇(g·v) and d(g·v)/dw (what
// REPLAY's product gives for the weights), all on one graph through the accumulated micro-batches.
struct Derivatives {
  TensorTree gradient, hvp;
  at::Tensor dw;
};

Derivatives derivatives(const LmProblem& p) {
  const TensorTree params = p.initial.params.requires_grad();
  const at::Tensor w = p.weights.detach().requires_grad_(true);
  const TensorTree g = p.step->gradient(TrainState{params, p.initial.opt, {}}, 1, w, /*create_graph=*/true);
  const TensorTree v =
      params.map([](const at::Tensor& x) { return at::sin(at::arange(x.numel(), x.options()) + 1.0).view_as(x); });
  std::vector<at::Tensor> inputs = params.tensors();
  inputs.push_back(w);
  const auto second = torch::autograd::grad({dot(g, v)}, inputs, {}, false, false, /*allow_unused=*/true);
  const std::vector<at::Tensor> hvp(second.begin(), second.end() - 1);
  return {g.detach(), with_values(params, hvp).detach(), second.back().detach()};
}

TEST(MicroBatches, TheAccumulatedStepEqualsTheFullBatchAtEveryOrder) {
  const Derivatives full = derivatives(problem_in(1)), split = derivatives(problem_in(3));
  for (const auto& e : full.gradient) {
    EXPECT_LE(testing::relative_error(split.gradient.at(e.name), e.tensor), 1e-12) << e.name;
    EXPECT_LE(testing::relative_error(split.hvp.at(e.name), full.hvp.at(e.name)), 1e-12) << e.name;
  }
  ASSERT_TRUE(full.dw.defined());
  EXPECT_GT(full.dw.abs().max().item<double>(), 0.0);
  EXPECT_LE(testing::relative_error(split.dw, full.dw), 1e-12);
}

}  // namespace
}  // namespace magic
