// The distributed pipelines compute only the levels a run wants (--checks, and under --bite a
// mutation's levels up to its expected one): levels after optimizer need the training run, replay
// and scores REPLAY. Every wanted level is still produced and equal to what the full run produces.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "checks/lm_pipelines.h"
#include "checks/run_check.h"
#include "checks/spd_pipelines.h"
#include "lib/distributed/runtime/runtime.h"

namespace magic {
namespace {

using checks::Level;

std::set<std::string> levels_of(const checks::PipelineOutputs& outputs) {
  std::set<std::string> levels;
  for (const auto& o : outputs) levels.insert(o.level);
  return levels;
}

// Rank 0's outputs of the workload's distributed pipeline with `levels` wanted.
checks::PipelineOutputs distributed_outputs(checks::CheckSettings s, std::vector<Level> levels) {
  s.levels = std::move(levels);
  const bool lm = s.resolved_workload() == "lm";
  const checks::ReferenceRun reference = checks::run_references(s).reference;
  checks::PipelineOutputs out;
  dist::run_ranks_in_threads(static_cast<int>(s.topology.world_size()), [&](dist::Runtime& rt) {
    checks::PipelineOutputs mine = lm ? checks::run_distributed_lm(s, rt, "", reference)
                                      : checks::run_distributed_spd(s, rt, "", reference.states);
    if (rt.rank() == 0) out = std::move(mine);
  });
  return out;
}

void expect_gated(const std::string& topology) {
  checks::CheckSettings s;
  s.topology = dist::TopologySpec::parse(topology);
  s.steps = 2;
  const auto with_optimizer = [&](std::set<std::string> levels) {
    levels.insert("optimizer");  // both workloads have optimizer rows
    return levels;
  };
  const checks::PipelineOutputs full = distributed_outputs(s, checks::all_levels());
  EXPECT_EQ(levels_of(full), with_optimizer({"grad", "query_grad", "hvp", "replay", "final_params", "scores"}));

  const checks::PipelineOutputs grad_only = distributed_outputs(s, {Level::kGrad});
  EXPECT_EQ(levels_of(grad_only), std::set<std::string>{"grad"}) << "no training run for the grad level";

  s.levels = checks::all_levels();
  const checks::PipelineOutputs through_optimizer = distributed_outputs(s, s.levels_through("optimizer"));
  EXPECT_EQ(levels_of(through_optimizer), with_optimizer({"grad"})) << "no training run for the optimizer level";

  const checks::PipelineOutputs through_hvp = distributed_outputs(s, s.levels_through("hvp"));
  EXPECT_EQ(levels_of(through_hvp), with_optimizer({"grad", "query_grad", "hvp", "final_params"}))
      << "training without REPLAY";

  // What is computed is what the full run computes, bit for bit.
  std::map<std::string, at::Tensor> by_name;
  for (const auto& o : full) by_name[o.level + "/" + o.name] = o.value;
  for (const auto* part : {&grad_only, &through_optimizer, &through_hvp}) {
    for (const auto& o : *part) {
      ASSERT_TRUE(by_name.count(o.level + "/" + o.name)) << o.level << "/" << o.name;
      EXPECT_TRUE(at::equal(o.value, by_name.at(o.level + "/" + o.name))) << o.level << "/" << o.name;
    }
  }
}

TEST(LevelGating, MeshPipelineComputesOnlyTheWantedLevels) {
  expect_gated("dp=2,cp=2");
}

TEST(LevelGating, ThreePoolPipelineComputesOnlyTheWantedLevels) {
  expect_gated("n_ci=2,n_per_block=1,n_blocks=2,n_ppgd=1");
}

TEST(LevelGating, LevelsThroughKeepsTheWantedLevelsUpToTheLastInOrder) {
  checks::CheckSettings s;
  EXPECT_EQ(s.levels_through("grad"), std::vector<Level>{Level::kGrad});
  EXPECT_EQ(s.levels_through("hvp"),
            (std::vector<Level>{Level::kGrad, Level::kOptimizer, Level::kQueryGrad, Level::kHvp}));
  EXPECT_EQ(s.levels_through("scores"), checks::all_levels());
  s.levels = {Level::kGrad, Level::kScores};  // --checks grad,scores
  EXPECT_EQ(s.levels_through("final_params"), std::vector<Level>{Level::kGrad});
  EXPECT_FALSE(s.wants_after(Level::kScores));
  EXPECT_TRUE(s.wants_after(Level::kGrad));
}

}  // namespace
}  // namespace magic
