// REPLAY (checkpointed, step-by-step VJPs) against the unrolled reference (one autograd graph
// through all steps, one autograd call): they compute dQ/dw by different routes, so agreement
// to 1e-10 in fp64 shows both are the derivative of the same training run.
#include <gtest/gtest.h>

#include "lib/core/strings.h"
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
  run.steps = 9;  // the N of DESIGN.md's schedule examples: sqrt 0 3 6 7 8, log 0 4 6 7 8
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
  // Q is the mean of the per-query losses, so its scores are the mean of the per-query scores.
  MagicResult mean = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, {});
  EXPECT_LE(testing::relative_error(per_query.scores.mean(0), mean.scores), 1e-12);
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
