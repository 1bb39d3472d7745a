// The gate's verdicts cannot pass by accident: every reference tensor meets its distributed
// partner or fails a row saying so; a report with no rows fails; a mutation is caught only with
// the numeric value of its factor, and a factor whose value other sizes share is flagged; what
// --bite leaves out is listed with the reason; a mutation whose level is not checked is refused.
#include <gtest/gtest.h>

#include <map>

#include "checks/mutations.h"
#include "checks/pipeline_outputs.h"
#include "checks/planted_precision.h"
#include "lib/core/error.h"
#include "tests/support.h"

namespace magic {
namespace {

checks::CheckSettings settings_for(const std::string& topology) {
  checks::CheckSettings s;
  s.topology = dist::TopologySpec::parse(topology);
  return s;
}

at::Tensor ramp(int64_t n) {
  return at::arange(1, n + 1, at::kDouble);
}

checks::PipelineOutputs reference_outputs() {
  return {{"grad", "w", ramp(4)}, {"hvp", "theta_0", ramp(3)}, {"scores", "per_document", ramp(5)}};
}

const CheckRow* find_row(const std::vector<CheckRow>& rows, const std::string& level, const std::string& tensor) {
  for (const auto& r : rows) {
    if (r.level == level && r.tensor == tensor) return &r;
  }
  return nullptr;
}

TEST(CompareOutputs, ADroppedDistributedTensorIsAFailingRowNamingIt) {
  checks::PipelineOutputs distributed = reference_outputs();
  distributed.erase(distributed.begin() + 1);  // the distributed side lost hvp/theta_0
  const auto rows = checks::compare_outputs(distributed, reference_outputs(), settings_for("dp=2"));
  ASSERT_EQ(rows.size(), 3u);
  const CheckRow* missing = find_row(rows, "hvp", "theta_0");
  ASSERT_NE(missing, nullptr);
  EXPECT_FALSE(missing->passed);
  EXPECT_NE(missing->diagnosis.text.find("missing"), std::string::npos) << missing->diagnosis.text;
  EXPECT_TRUE(find_row(rows, "grad", "w")->passed);
}

TEST(CompareOutputs, AnExtraOrMisShapedTensorFailsItsRow) {
  checks::PipelineOutputs distributed = reference_outputs();
  distributed[2].value = ramp(6);
  distributed.push_back({"grad", "stray", ramp(2)});
  const auto rows = checks::compare_outputs(distributed, reference_outputs(), settings_for("dp=2"));
  const CheckRow* shape = find_row(rows, "scores", "per_document");
  ASSERT_NE(shape, nullptr);
  EXPECT_FALSE(shape->passed);
  EXPECT_NE(shape->diagnosis.text.find("shape mismatch: distributed [6], reference [5]"), std::string::npos)
      << shape->diagnosis.text;
  const CheckRow* extra = find_row(rows, "grad", "stray");
  ASSERT_NE(extra, nullptr);
  EXPECT_FALSE(extra->passed);
  EXPECT_NE(extra->diagnosis.text.find("extra"), std::string::npos);
}

TEST(CompareOutputs, OnlyTheCheckedLevelsGetRows) {
  checks::CheckSettings s = settings_for("dp=2");
  s.levels = {checks::Level::kScores};
  checks::PipelineOutputs distributed = reference_outputs();
  distributed.erase(distributed.begin());  // grad is not checked: no row, no failure
  const auto rows = checks::compare_outputs(distributed, reference_outputs(), s);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].passed);
}

TEST(Report, NoRowsIsAFailureInEveryFormat) {
  CheckReport empty;
  empty.topology = "dp=2";
  EXPECT_FALSE(empty.rows_pass());
  EXPECT_EQ(empty.exit_code(), 1);
  std::ostringstream table;
  print_report(empty, table);
  EXPECT_NE(table.str().find("FAIL: no tensor was compared"), std::string::npos) << table.str();
  EXPECT_EQ(report_json(empty)["passed"], false);
  EXPECT_NE(junit_xml(empty).find("failures=\"1\""), std::string::npos) << junit_xml(empty);
}

// A failing row whose distributed tensor is `scale` times the reference, diagnosed on `topology`.
CheckRow scaled_row(const std::string& level, double scale, const std::string& topology) {
  const at::Tensor r = ramp(6);
  return make_check_row(level, "V/U", scale * r, r, 1e-9,
                        candidate_factors(dist::TopologySpec::parse(topology).named_sizes()));
}

const checks::Mutation& mutation(const std::string& name) {
  for (const auto& m : checks::mutation_catalog()) {
    if (m.name == name) return m;
  }
  throw std::logic_error("no mutation " + name);
}

TEST(JudgeMutation, AFactorOtherSizesShareIsCaughtButFlaggedAsNotDistinct) {
  const std::string square = "n_ci=4,n_per_block=2,n_blocks=2,n_ppgd=2";
  const BiteOutcome b = checks::judge_mutation(mutation("faith-on-all-ranks"), dist::TopologySpec::parse(square),
                                               {scaled_row("grad", 2.0, square)});
  EXPECT_TRUE(b.caught);
  EXPECT_FALSE(b.factor_distinct);
  EXPECT_EQ(b.observed_factor, "x n_per_block = x n_blocks = x n_ppgd");
}

TEST(JudgeMutation, OnALayoutWhoseSizesDifferTheFactorIsExactlyOneName) {
  const std::string distinct = "n_ci=6,n_per_block=2,n_blocks=4,n_ppgd=3";
  const BiteOutcome b = checks::judge_mutation(mutation("faith-on-all-ranks"), dist::TopologySpec::parse(distinct),
                                               {scaled_row("grad", 2.0, distinct)});
  EXPECT_TRUE(b.caught);
  EXPECT_TRUE(b.factor_distinct);
  EXPECT_EQ(b.observed_factor, "x n_per_block");
}

TEST(JudgeMutation, TheWrongFactorIsNotACatch) {
  const std::string distinct = "n_ci=6,n_per_block=2,n_blocks=4,n_ppgd=3";
  // x 3 is n_ppgd's value, not n_per_block's: the level is right, the factor is not.
  const BiteOutcome b = checks::judge_mutation(mutation("faith-on-all-ranks"), dist::TopologySpec::parse(distinct),
                                               {scaled_row("grad", 3.0, distinct)});
  EXPECT_EQ(b.observed_level, "grad");
  EXPECT_EQ(b.observed_factor, "x n_ppgd");
  EXPECT_FALSE(b.caught);
}

TEST(JudgeMutation, AMissingRowIsNoCatchOfAScaling) {
  const std::string distinct = "n_ci=6,n_per_block=2,n_blocks=4,n_ppgd=3";
  const BiteOutcome b = checks::judge_mutation(mutation("faith-on-all-ranks"), dist::TopologySpec::parse(distinct),
                                               {make_unmatched_row("grad", "V/U", 1e-9, "missing")});
  EXPECT_FALSE(b.caught);
}

TEST(BitePlan, ListsTheMutationsThatDoNotApplyAndWhy) {
  const auto plan = checks::plan_bite(dist::TopologySpec::parse("n_ci=2,n_per_block=1"), checks::all_levels());
  EXPECT_EQ(plan.run.size(), 9u);  // five of the layout's pools, two of its clip, δw's assembly, REPLAY's restore
  // two of the layout, three of the precision policy and REPLAY's start, which needs a loss scale (fp64 here)
  ASSERT_EQ(plan.skipped.size(), 6u);
  for (const auto& k : plan.skipped) {
    if (k.mutation == "faith-on-all-ranks" || k.mutation == "avg-block-reduce") {
      EXPECT_EQ(k.reason, "needs n_per_block >= 2 (n_per_block=1 here)");
    } else {
      EXPECT_TRUE(checks::is_precision_mutation(k.mutation) || k.mutation == "replay-start-keeps-loss-scale")
          << k.mutation;
      EXPECT_EQ(k.reason.rfind("needs a", 0), 0u) << k.reason;
    }
  }
}

TEST(BitePlan, SkipsTheMutationsWhoseLevelIsNotChecked) {
  const auto plan = checks::plan_bite(dist::TopologySpec::parse("dp=3"), {checks::Level::kGrad});
  for (const auto& m : plan.run) EXPECT_EQ(m.expected_level, "grad") << m.name;
  bool saw_scores = false;
  for (const auto& k : plan.skipped) {
    if (k.mutation != "extra-divide-scores") continue;
    saw_scores = true;
    EXPECT_EQ(k.reason, "it shows first at level replay, which --checks grad leaves out");
  }
  EXPECT_TRUE(saw_scores);
  size_t mesh_mutations = 0;
  for (const auto& m : checks::mutation_catalog())
    mesh_mutations += !m.family || m.family == dist::TopologyFamily::kMesh;
  // 14 of the mesh's parallelism, 5 of the precision policy, 3 of clipping, the optimizer input's,
  // the query gradient's, REPLAY's restore, REPLAY's unscale of the optimizer state's cotangents,
  // REPLAY's start, 2 of gradient accumulation, 9 of tensor and 2 of sequence parallelism, 5 of
  // the encoder/LM bridge (4 in the bridge, 1 in the clip's joint norm over both meshes), 5 of
  // pipeline stages and 2 of ring attention
  EXPECT_EQ(mesh_mutations, 52u);
  EXPECT_EQ(plan.run.size() + plan.skipped.size(), mesh_mutations);  // every one, in one list or the other
}

// A clip bug needs a run that clips, a restore bug a checkpoint after step 0: where the checked run
// has neither, the mutation is skipped saying so (never counted as caught).
TEST(BitePlan, SkipsClipAndRestoreMutationsTheRunCannotShow) {
  const auto plan = checks::plan_bite(dist::TopologySpec::parse("dp=2,fsdp=2"), checks::all_levels(), {},
                                      checks::RunTraits{/*clipping=*/false, /*later_checkpoint=*/false});
  std::map<std::string, std::string> skipped;
  for (const auto& k : plan.skipped) skipped[k.mutation] = k.reason;
  EXPECT_EQ(skipped["clip-local-norm"], "needs gradient clipping (the checked run has no optimizer.clip_norm)");
  EXPECT_EQ(skipped["clip-shard-norm-not-reduced"],
            "needs gradient clipping (the checked run has no optimizer.clip_norm)");
  EXPECT_EQ(skipped["replay-restore-fresh-optimizer"],
            "needs a checkpoint after step 0 for REPLAY to restore (2 steps or more)");
  for (const auto& m : plan.run) EXPECT_FALSE(m.needs_clipping || m.needs_later_checkpoint) << m.name;
}

TEST(FindMutation, RefusesAMutationWhoseLevelIsNotChecked) {
  const std::string error = testing::input_error_of(
      [] { checks::find_mutation("extra-divide-scores", dist::TopologySpec::parse("dp=4"), {checks::Level::kHvp}); });
  EXPECT_NE(error.find("--mutate extra-divide-scores: it shows first at level replay, which --checks hvp leaves out"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace magic
