// Pipeline stages as ranks (threads, Gloo), their activations and cotangents through portals
// (lib/distributed/parallel/pipeline_stage_runner.h), against the whole GPT in one process:
//   - each stage's gradient, summed over micro-batches, is its parameters' part of the single
//     process's (a tied head's two copies of tok_emb add up to its gradient);
//   - the Hessian-vector product, each micro-batch's gradient differentiated again across the
//     stages in one pass through ordered_gradient_sum, likewise: the portals carry the
//     second-order cotangents both ways;
//   - GPipe and 1F1B give the same bits, at second order too (a plain sum's pass does not);
//   - a stage that never runs is named by its peer within the timeout.
// Layouts: pp = 2 with 4 micro-batches; pp = 4 (one layer a stage) with a tied head; pp = 2 with
// two virtual stages each and a tied head.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/ordered_gradient_sum.h"
#include "lib/distributed/parallel/pipeline_stage_runner.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/model/gpt.h"
#include "tests/support.h"

namespace magic {
namespace {

constexpr int64_t kRows = 2, kLength = 5;

struct Problem {
  GptConfig config;
  TensorTree params, v;
  at::Tensor ids, w;  // [M·kRows, kLength], [M·kRows, kLength, vocab]
  int64_t micro_batches = 0;

  at::Tensor rows(const at::Tensor& t, int64_t m) const { return t.narrow(0, m * kRows, kRows); }
  // loss_m = Σ logits ⊙ w_m + 0.1 Σ logits²: a head with a second derivative of its own.
  at::Tensor loss(const at::Tensor& logits, int64_t m) const {
    return (logits * rows(w, m)).sum() + 0.1 * (logits * logits).sum();
  }
};

Problem problem(bool tied, int64_t micro_batches) {
  Problem p;
  p.config.vocab = 13;
  p.config.d_model = 8;
  p.config.n_layers = 4;
  p.config.n_heads = 2;
  p.config.max_len = 6;
  p.config.tied_head = tied;
  p.micro_batches = micro_batches;
  p.params = gpt_init(p.config, at::kDouble, 5);
  at::Generator gen = make_generator(6);
  p.ids = at::randint(0, p.config.vocab, {micro_batches * kRows, kLength}, gen, at::kLong);
  p.w = at::randn({micro_batches * kRows, kLength, p.config.vocab}, gen, at::kDouble);
  p.v = p.params.map([&](const at::Tensor& t) { return at::randn(t.sizes(), gen, at::kDouble); });
  return p;
}

struct Derivatives {
  TensorTree grad, hvp;
};

Derivatives single_process(const Problem& p) {
  const TensorTree params = p.params.requires_grad();
  at::Tensor total = at::zeros({}, at::kDouble);
  for (int64_t m = 0; m < p.micro_batches; ++m)
    total = total + p.loss(gpt_forward(p.config, params, p.rows(p.ids, m)), m);
  const auto leaves = params.tensors();
  const TensorTree g = with_values(params, torch::autograd::grad({total}, leaves, {}, true, true));
  return {g.detach(), with_values(params, torch::autograd::grad({dot(g, p.v)}, leaves))};
}

TensorTree sum_of(const std::vector<TensorTree>& trees) {
  TensorTree sum = trees.front();
  for (size_t m = 1; m < trees.size(); ++m) sum = add(sum, trees[m]);
  return sum;
}

// Each stage's gradient and HVP (summed over micro-batches in order), by stage.
std::vector<Derivatives> pipelined(const Problem& p, int64_t pp, int64_t vpp, dist::PipelineSchedule schedule,
                                   bool plain_sum = false) {
  std::vector<Derivatives> out(static_cast<size_t>(pp));
  std::mutex mutex;
  dist::run_ranks_in_threads(static_cast<int>(pp), [&](dist::Runtime& rt) {
    const int64_t stage = rt.rank();
    const std::vector<PipelineStage> chunks = pipeline_chunks(p.config.n_layers, pp, vpp, stage, "test");
    const TensorTree params = gpt_stage_parameters(p.config, chunks, p.params).requires_grad();
    const dist::PipelineStageRun run{rt.world().get(), pp, vpp, stage, schedule, p.micro_batches, "activations", 8};
    const auto forward = [&](int64_t m, int64_t v, const at::Tensor& input) {
      ModelLayout layout = ModelLayout::whole(kLength);
      layout.stage = chunks[static_cast<size_t>(v)];
      const at::Tensor out = gpt_forward(p.config, params, layout.stage.embeds ? p.rows(p.ids, m) : input, layout);
      return layout.stage.heads ? p.loss(out, m) : out;
    };
    const auto shape = [&](int64_t) { return std::vector<int64_t>{kRows, kLength, p.config.d_model}; };
    const dist::PipelineStageResult result = dist::run_pipeline_stage(run, params, forward, shape, true);
    const TensorTree grad = sum_of(result.gradients);
    // H v in one pass through the micro-batches' sum, which differentiates them one at a time in
    // order (ordered_gradient_sum.h); a plain sum's pass gives schedules that differ in the last bits.
    const TensorTree v = gpt_stage_parameters(p.config, chunks, p.v);
    const TensorTree g =
        plain_sum ? sum_of(result.gradients) : dist::ordered_gradient_sum(result.gradients, params.tensors());
    const TensorTree hvp =
        with_values(params, torch::autograd::grad({dot(g, v)}, params.tensors(), {}, true, false, true));
    dist::wait_portal_sends(*rt.world());
    std::lock_guard<std::mutex> lock(mutex);
    out[static_cast<size_t>(stage)] = {grad.detach(), hvp.detach()};
  });
  return out;
}

// A parameter's derivative summed over the stages that hold a copy of it.
at::Tensor over_stages(const std::vector<Derivatives>& stages, const std::string& name, bool hvp) {
  at::Tensor sum;
  for (const auto& s : stages) {
    const TensorTree& tree = hvp ? s.hvp : s.grad;
    if (tree.contains(name)) sum = sum.defined() ? sum + tree.at(name) : tree.at(name);
  }
  return sum;
}

class PipelineStageRunner : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, bool>> {};

TEST_P(PipelineStageRunner, StagesGiveTheSingleProcessGradientAndHvpAndSchedulesTheSameBits) {
  const auto [pp, vpp, micro_batches, tied] = GetParam();
  const Problem p = problem(tied, micro_batches);
  const Derivatives expected = single_process(p);
  const auto one_f_one_b = pipelined(p, pp, vpp, dist::PipelineSchedule::kOneForwardOneBackward);
  const auto gpipe = pipelined(p, pp, vpp, dist::PipelineSchedule::kGpipe);
  for (const auto& e : expected.grad) {
    const at::Tensor g = over_stages(one_f_one_b, e.name, false), h = over_stages(one_f_one_b, e.name, true);
    ASSERT_TRUE(g.defined()) << e.name << " is on no stage";
    EXPECT_LT(testing::relative_error(g, e.tensor), 1e-12) << e.name;
    EXPECT_LT(testing::relative_error(h, expected.hvp.at(e.name)), 1e-11) << e.name;
  }
  for (int64_t s = 0; s < pp; ++s) {
    for (const auto& e : one_f_one_b[static_cast<size_t>(s)].grad) {
      EXPECT_TRUE(at::equal(e.tensor, gpipe[static_cast<size_t>(s)].grad.at(e.name))) << "stage " << s << " " << e.name;
      EXPECT_TRUE(
          at::equal(one_f_one_b[static_cast<size_t>(s)].hvp.at(e.name), gpipe[static_cast<size_t>(s)].hvp.at(e.name)))
          << "stage " << s << " " << e.name;
    }
  }
  // With a tied head each copy of tok_emb has a part of its gradient, neither of them all of it.
  if (tied) {
    const at::Tensor first = one_f_one_b.front().grad.at("tok_emb"), last = one_f_one_b.back().grad.at("tok_emb");
    EXPECT_GT(testing::relative_error(first, expected.grad.at("tok_emb")), 1e-3);
    EXPECT_GT(testing::relative_error(last, expected.grad.at("tok_emb")), 1e-3);
  }
}

// In one process: the ordered sum's value is the sum, and its derivative the plain sum's; an
// entry no micro-batch differentiates (zeros, no graph) and a micro-batch that does not reach an
// entry pass through.
TEST(OrderedGradientSum, ItsValueAndDerivativeAreThePlainSums) {
  at::Generator gen = make_generator(3);
  const at::Tensor a = at::randn({4}, gen, at::kDouble).requires_grad_(true);
  const at::Tensor b = at::randn({3}, gen, at::kDouble).requires_grad_(true);
  const at::Tensor va = at::randn({4}, gen, at::kDouble), vb = at::randn({3}, gen, at::kDouble);
  std::vector<TensorTree> parts;
  for (int m = 0; m < 3; ++m) {
    // f_m = Σ sin((m+1)·a)·Σ b² for m < 2; f_2 = Σ a³ (b not reached).
    const at::Tensor f = m < 2 ? ((m + 1.0) * a).sin().sum() * (b * b).sum() : (a * a * a).sum();
    auto g = torch::autograd::grad({f}, {a, b}, {}, true, true, true);
    TensorTree t;
    t.insert("a", g[0]);
    t.insert("b", g[1].defined() ? g[1] : at::zeros_like(b));
    t.insert("c", at::zeros({2}, at::kDouble));
    parts.push_back(t);
  }
  const TensorTree ordered = dist::ordered_gradient_sum(parts, {a, b});
  TensorTree plain = parts[0];
  for (size_t m = 1; m < parts.size(); ++m) plain = add(plain, parts[m]);
  for (const auto& e : plain) EXPECT_TRUE(at::allclose(ordered.at(e.name), e.tensor, 0, 1e-15)) << e.name;
  const auto h_ordered = torch::autograd::grad({(ordered.at("a") * va).sum() + (ordered.at("b") * vb).sum()}, {a, b});
  const auto h_plain = torch::autograd::grad({(plain.at("a") * va).sum() + (plain.at("b") * vb).sum()}, {a, b});
  EXPECT_TRUE(at::allclose(h_ordered[0], h_plain[0], 1e-14, 1e-14));
  EXPECT_TRUE(at::allclose(h_ordered[1], h_plain[1], 1e-14, 1e-14));
  EXPECT_FALSE(ordered.at("c").requires_grad());
}

// Planted: the HVP's pass through a plain sum of the micro-batches' gradients. As accurate, but
// the schedules accumulate in the orders their graphs were built in: not the same bits.
TEST(PipelineStageRunnerPlanted, APlainSumsPassGivesSchedulesThatDifferInTheLastBits) {
  const Problem p = problem(false, 4);
  const auto a = pipelined(p, 2, 1, dist::PipelineSchedule::kOneForwardOneBackward, true);
  const auto b = pipelined(p, 2, 1, dist::PipelineSchedule::kGpipe, true);
  bool all_equal = true;
  for (int64_t s = 0; s < 2; ++s) {
    for (const auto& e : a[static_cast<size_t>(s)].hvp)
      all_equal = all_equal && at::equal(e.tensor, b[static_cast<size_t>(s)].hvp.at(e.name));
  }
  EXPECT_FALSE(all_equal);
}

// pp = 2: stage 1 never runs (alive elsewhere past the timeout). Stage 0's forward only posts its
// send; its first backward waits for the cotangent and fails within the timeout, naming the
// portal, the phase, the derivative order and both ranks.
TEST(PipelineStageRunnerPlanted, AStageThatNeverRunsIsNamedByItsPeerWithinTheTimeout) {
  const Problem p = problem(false, 2);
  std::string error;
  const auto started = std::chrono::steady_clock::now();
  dist::run_ranks_in_threads(
      2,
      [&](dist::Runtime& rt) {
        dist::set_phase("training step 2");
        if (rt.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(3));
          return;
        }
        const std::vector<PipelineStage> chunks = pipeline_chunks(p.config.n_layers, 2, 1, 0, "test");
        const TensorTree params = gpt_stage_parameters(p.config, chunks, p.params).requires_grad();
        const dist::PipelineStageRun run{rt.world().get(), 2, 1, 0, dist::PipelineSchedule::kGpipe, 2,
                                         "activations",    8};
        const auto forward = [&](int64_t m, int64_t, const at::Tensor&) {
          ModelLayout layout = ModelLayout::whole(kLength);
          layout.stage = chunks[0];
          return gpt_forward(p.config, params, p.rows(p.ids, m), layout);
        };
        const auto shape = [&](int64_t) { return std::vector<int64_t>{kRows, kLength, p.config.d_model}; };
        try {
          dist::run_pipeline_stage(run, params, forward, shape, false);
        } catch (const DistributedError& e) {
          error = e.what();
        }
        // Its forward's send was never received: clear it, so that no later wait on this rank sees it.
        try {
          dist::wait_portal_sends(*rt.world());
        } catch (const DistributedError&) {
        }
      },
      std::chrono::seconds(2));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_NE(error.find("portal 'activations' (training step 2, derivative order 1)"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 0 waited for rank 1, which never sent"), std::string::npos) << error;
  EXPECT_LT(waited, 2.0 + 5.0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PipelineStageRunner,
                         ::testing::Values(std::make_tuple(2, 1, 4, false), std::make_tuple(4, 1, 4, true),
                                           std::make_tuple(2, 2, 2, true)),
                         [](const auto& info) {
                           return str_cat("pp", std::get<0>(info.param), "_vpp", std::get<1>(info.param), "_mb",
                                          std::get<2>(info.param), std::get<3>(info.param) ? "_tied" : "");
                         });

}  // namespace
}  // namespace magic
