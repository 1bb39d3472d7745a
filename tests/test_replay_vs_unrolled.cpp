// REPLAY (checkpointed, step-by-step VJPs) against the unrolled reference (one autograd graph
// through all steps, one autograd call): they compute dQ/dw by different routes, so agreement
// to 1e-10 in fp64 shows both are the derivative of the same training run.
#include <gtest/gtest.h>

#include "lib/core/strings.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"
#include "lib/train/magic_pipeline.h"
#include "tests/support.h"

namespace magic {
namespace {

using testing::TinyRun;

struct ReplayCase {
  std::string optimizer, checkpoints, weights, schedule;
  bool clip;
};

std::string describe(const ReplayCase& c) {
  return c.optimizer + "_" + c.checkpoints + "_" + c.weights + "_" + c.schedule + (c.clip ? "_clip" : "");
}
std::string case_name(const ::testing::TestParamInfo<ReplayCase>& info) {
  return describe(info.param);
}
void PrintTo(const ReplayCase& c, std::ostream* out) {
  *out << describe(c);
}

class ReplayVsUnrolled : public ::testing::TestWithParam<ReplayCase> {};

TEST_P(ReplayVsUnrolled, ScoresAgreeToOneInTenBillion) {
  const auto& c = GetParam();
  TinyRun run;
  run.optimizer = c.optimizer;
  run.checkpoints = c.checkpoints;
  run.weights = c.weights;
  run.schedule = c.schedule;
  run.clip = c.clip;
  run.steps = 9;  // the N of docs/design.md's checkpoint examples ("The mathematics"): sqrt 0 3 6 7 8, log 0 4 6 7 8
  const RunConfig config = testing::tiny_run_config(run);
  const LmProblem problem = build_lm_problem(config);

  MagicOptions options;
  options.schedule = config.checkpoints;
  MagicResult replay = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  auto unrolled = reference::unrolled_lm_scores(testing::unrolled_setup(problem, config), problem.weights);

  ASSERT_EQ(replay.scores.sizes(), unrolled.scores.sizes());
  EXPECT_GT(unrolled.scores.abs().max().item<double>(), 1e-8) << "scores vanish: the comparison would be empty";
  const double error = testing::relative_error(replay.scores, unrolled.scores);
  RecordProperty("scores_relative_error", format_sci(error, 2));
  EXPECT_LE(error, 1e-10);
  EXPECT_LE(testing::relative_error(replay.final_state.params.flatten(), unrolled.final_params.flatten()), 1e-12);
  EXPECT_NEAR(replay.query_loss, unrolled.query_loss, 1e-12);
}

std::vector<ReplayCase> all_cases() {
  std::vector<ReplayCase> cases;
  for (std::string opt : {"sgd", "adam", "adamw"}) {
    for (std::string ckpt : {"all", "sqrt", "log"}) {
      for (std::string weights : {"per_document", "per_token"}) {
        cases.push_back({opt, ckpt, weights, "constant", false});
      }
    }
    cases.push_back({opt, "sqrt", "per_document", "cosine", true});  // warmup + cosine, clipping on
    cases.push_back({opt, "log", "per_token", "linear", true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Schedules, ReplayVsUnrolled, ::testing::ValuesIn(all_cases()), case_name);

TEST(ReplayScores, ReductionsOtherThanMeanAgreeWithTheReference) {
  for (std::string reduction : {"sum_of_means", "sum"}) {
    TinyRun run;
    run.reduction = reduction;
    run.optimizer = "adamw";
    const RunConfig config = testing::tiny_run_config(run);
    const LmProblem problem = build_lm_problem(config);
    MagicResult replay = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, {});
    auto unrolled = reference::unrolled_lm_scores(testing::unrolled_setup(problem, config), problem.weights);
    EXPECT_LE(testing::relative_error(replay.scores, unrolled.scores), 1e-10) << reduction;
  }
}

TEST(ReplayScores, PerQueryModeEqualsOneRunPerQueryAndAveragesToTheMean) {
  TinyRun run;
  run.optimizer = "adam";
  const RunConfig config = testing::tiny_run_config(run);
  const LmProblem problem = build_lm_problem(config);
  MagicOptions options;
  options.per_query = true;
  MagicResult per_query = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  auto unrolled = reference::unrolled_lm_scores(testing::unrolled_setup(problem, config), problem.weights, true);
  ASSERT_EQ(per_query.scores.size(0), problem.query->num_queries());
  EXPECT_LE(testing::relative_error(per_query.scores, unrolled.scores), 1e-10);
  // Three products in one backward pass (the last batch is shorter when Q is not a multiple).
  options.query_batch = 3;
  const MagicResult batched = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  EXPECT_LE(testing::relative_error(batched.scores, unrolled.scores), 1e-10);
  // Q is the mean of the per-query losses, so its scores are the mean of the per-query scores.
  MagicResult mean = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, {});
  EXPECT_LE(testing::relative_error(per_query.scores.mean(0), mean.scores), 1e-12);
}

// Queries are documents: a query longer than max_len (here every query, max_len 24) is cut into
// chunks and scored as one query, the mean of its token losses over all its chunks; Q is the mean
// over documents, and per-query mode has one row per document.
TEST(ReplayScores, AQueryLongerThanTheContextIsOneQueryOverAllItsChunks) {
  TinyRun run;
  const RunConfig config = testing::tiny_run_config(run);
  const LmProblem problem = build_lm_problem(config);
  const TokenDataset& chunks = problem.query->queries();
  const auto documents = static_cast<int64_t>(problem.query_documents.size());
  ASSERT_GT(chunks.size(), documents) << "the test needs queries longer than max_len";
  EXPECT_EQ(problem.query->num_queries(), documents);

  // Q by hand: per document, its chunks' token losses summed over its label count.
  const TensorTree& params = problem.initial.params;
  std::vector<double> loss_sum(documents, 0.0), labels(documents, 0.0);
  for (int64_t k = 0; k < chunks.size(); ++k) {
    const at::Tensor ids = chunks.input_ids.narrow(0, k, 1), chunk_labels = chunks.labels.narrow(0, k, 1);
    const at::Tensor losses = next_token_losses(gpt_forward(problem.model, params, ids), chunk_labels);
    const at::Tensor valid = chunk_labels.narrow(1, 1, chunk_labels.size(1) - 1).ne(kIgnoreLabel);
    loss_sum[chunks.examples[k].document] += losses.masked_select(valid).sum().item<double>();
    labels[chunks.examples[k].document] += valid.sum().item<double>();
  }
  double expected = 0.0;
  for (int64_t d = 0; d < documents; ++d) expected += loss_sum[d] / labels[d] / static_cast<double>(documents);
  EXPECT_NEAR(problem.query->loss(params).item<double>(), expected, 1e-12);
  EXPECT_NEAR(problem.query->loss(params, 2).item<double>(), loss_sum[2] / labels[2], 1e-12);

  MagicOptions options;
  options.per_query = true;
  const MagicResult per_query = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  EXPECT_EQ(per_query.scores.size(0), documents);
}

TEST(ReplayScores, SpillingCheckpointsToDiskGivesBitIdenticalScores) {
  TinyRun run;
  run.optimizer = "adamw";
  const LmProblem problem = testing::tiny_lm_problem(run);
  MagicOptions memory;
  MagicOptions disk;
  disk.spill_dir = ::testing::TempDir();
  MagicResult a = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, memory);
  MagicResult b = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, disk);
  EXPECT_TRUE(at::equal(a.scores, b.scores));
}

TEST(ReplayScores, CpuRunsRepeatBitExactly) {
  TinyRun run;
  run.optimizer = "adam";
  const LmProblem p1 = testing::tiny_lm_problem(run);
  const LmProblem p2 = testing::tiny_lm_problem(run);
  MagicResult a = run_magic(*p1.step, *p1.query, p1.initial, p1.weights, {});
  MagicResult b = run_magic(*p2.step, *p2.query, p2.initial, p2.weights, {});
  EXPECT_TRUE(at::equal(a.scores, b.scores));
}

}  // namespace
}  // namespace magic
