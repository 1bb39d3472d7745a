// Label smoothing (lm_loss.h) through the gate: the distributed lm pipeline with ε against the
// single-process reference with ε is exact at fp64 at every level on a dp x cp layout and an
// fsdp one; a distributed side that smooths differently (ε applied twice, or not at all) fails at
// the first level, grad. Rank threads, two steps: a few seconds each.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "checks/lm_pipelines.h"
#include "checks/pipeline_outputs.h"
#include "checks/run_check.h"
#include "lib/distributed/runtime/runtime.h"

namespace magic {
namespace {

checks::CheckSettings smoothed(const std::string& topology, double eps) {
  checks::CheckSettings s;
  s.topology = dist::TopologySpec::parse(topology);
  s.steps = 2;
  s.label_smoothing = eps;
  return s;
}

// The rows of the reference of `reference_settings` against the distributed pipeline run with
// `distributed_settings` (the same layout; a planted bug may change its ε).
std::vector<CheckRow> gate(const checks::CheckSettings& reference_settings,
                           const checks::CheckSettings& distributed_settings) {
  const checks::ReferenceRun reference = checks::run_references(reference_settings).reference;
  checks::PipelineOutputs out;
  dist::run_ranks_in_threads(static_cast<int>(distributed_settings.topology.world_size()), [&](dist::Runtime& rt) {
    checks::PipelineOutputs mine = checks::run_distributed_lm(distributed_settings, rt, "", reference);
    if (rt.rank() == 0) out = std::move(mine);
  });
  return checks::compare_outputs(out, reference.outputs, reference_settings);
}

void expect_exact(const std::string& topology) {
  const std::vector<CheckRow> rows = gate(smoothed(topology, 0.1), smoothed(topology, 0.1));
  ASSERT_GT(rows.size(), 100u);
  double worst = 0.0;
  std::set<std::string> levels;
  for (const auto& row : rows) {
    EXPECT_TRUE(row.passed) << row.level << "/" << row.tensor << ": " << row.diagnosis.text;
    worst = std::max(worst, row.stats.worst_rel_err);
    levels.insert(row.level);
  }
  EXPECT_EQ(levels,
            (std::set<std::string>{"grad", "optimizer", "query_grad", "hvp", "replay", "final_params", "scores"}));
  std::printf("%s, label smoothing 0.1, fp64: %zu rows pass, worst relative error %.3g\n", topology.c_str(),
              rows.size(), worst);
  EXPECT_LE(worst, 1e-9);
}

TEST(LabelSmoothingGate, ExactAtEveryLevelOnDpTimesCp) {
  expect_exact("dp=2,cp=3");
}

TEST(LabelSmoothingGate, ExactAtEveryLevelWithShardedParameters) {
  expect_exact("dp=2,fsdp=2");
}

// The smoothing reaches the reference: its gradients move with ε.
TEST(LabelSmoothingGate, TheReferencesGradientDependsOnEpsilon) {
  const auto grad_of = [](double eps) {
    checks::CheckSettings s = smoothed("dp=1", eps);
    s.levels = {checks::Level::kGrad};
    for (const auto& o : checks::run_references(s).reference.outputs) {
      if (o.level == "grad" && o.name == "head.weight") return o.value;
    }
    return at::Tensor();
  };
  const at::Tensor plain = grad_of(0.0), smooth = grad_of(0.1);
  ASSERT_TRUE(plain.defined() && smooth.defined());
  EXPECT_GT((smooth - plain).abs().max().item<double>() / plain.abs().max().item<double>(), 1e-3);
}

// Planted: the distributed side smooths the smoothed target again (ε' = 2ε - ε²), or not at all,
// while the reference smooths once. The gate fails, first at grad.
TEST(LabelSmoothingGate, ADistributedSideThatSmoothsDifferentlyFailsAtGrad) {
  for (double planted : {0.1 * 2 - 0.1 * 0.1, 0.0}) {
    checks::CheckSettings reference = smoothed("dp=2,cp=3", 0.1), distributed = smoothed("dp=2,cp=3", planted);
    reference.levels = distributed.levels = {checks::Level::kGrad};
    const std::vector<CheckRow> rows = gate(reference, distributed);
    int failed = 0;
    for (const auto& row : rows) failed += row.passed ? 0 : 1;
    std::printf("distributed eps %g against reference eps 0.1: %d of %zu grad rows fail\n", planted, failed,
                rows.size());
    EXPECT_GT(failed, 0) << planted;
  }
}

}  // namespace
}  // namespace magic
