// The reduction rows on tensor-parallel layouts (docs/magic-check.md, "Mixed precision"), ranks as
// threads: each parameter's reduced gradient is judged against the exact sum over the ranks its
// reduction adds (DataParallel::sum_over_reduction_groups): dp·cp of them for a tp piece or a
// parameter every tp rank holds whole, dp·cp·tp under sp for a replicated one, whose gradient is
// partial on each tp rank. Clean runs pass every row, the reduction rows present; each
// reduction-dtype bug fails at grad on the reduction rows alone.
#include <gtest/gtest.h>

#include "checks/lm_pipelines.h"
#include "checks/run_check.h"
#include "lib/model/gpt.h"
#include "tests/support.h"

namespace magic {
namespace {

checks::CheckRequest grad_check(const std::string& layout, c10::ScalarType compute, const std::string& mutation) {
  checks::CheckRequest request;
  request.settings.topology = dist::TopologySpec::parse(layout);
  request.settings.precision = PrecisionPolicy::for_compute(compute);
  request.settings.levels = {checks::Level::kGrad};
  if (!mutation.empty()) {
    request.mode = checks::CheckMode::kMutate;
    request.mutation = mutation;
  }
  return request;
}

// "blocks.0.ln1.weight[reduction]" -> "blocks.0.ln1.weight"
std::string parameter_of(const std::string& row) {
  return row.substr(0, row.size() - std::string("[reduction]").size());
}

TEST(TensorParallelReductionRows, CleanRunsPassWithARowPerParameterOverItsReductionGroup) {
  for (const auto& [layout, compute] :
       {std::pair{"dp=2,tp=2,sp", c10::kBFloat16}, std::pair{"dp=2,tp=2,fsdp=2", c10::kBFloat16},
        std::pair{"dp=2,tp=2", c10::kHalf}}) {
    const checks::CheckRequest request = grad_check(layout, compute, "");
    const CheckReport report = testing::run_check_in_threads(request);
    const bool sp = request.settings.topology.sp();
    int reduction_rows = 0, summed_over_tp = 0;
    for (const auto& row : report.rows) {
      EXPECT_TRUE(row.passed) << layout << " " << row.tensor << ": " << row.diagnosis.text;
      if (!row.reduction) continue;
      ++reduction_rows;
      const bool replicated = split_of(gpt_parallel_plan(), parameter_of(row.tensor)) == TensorSplit::kReplicated;
      summed_over_tp += replicated && sp ? 1 : 0;
      EXPECT_EQ(row.reduction->terms, replicated && sp ? 4 : 2) << layout << " " << row.tensor;
      EXPECT_LE(row.reduction->worst, row.reduction->bound) << layout << " " << row.tensor;
    }
    EXPECT_EQ(reduction_rows, 17) << layout << ": one per parameter of the lm workload";
    // pos_emb, ln1, ln2 and ln_f (weight and bias) and the two row-parallel biases of the one
    // block; none without sp.
    EXPECT_EQ(summed_over_tp, sp ? 9 : 0) << layout;
    EXPECT_EQ(report.exit_code(), 0) << layout;
  }
}

TEST(TensorParallelReductionRows, AReductionInTheComputeDtypeFailsTheReductionRowsAlone) {
  for (const auto& [layout, mutation] : {std::pair{"dp=2,tp=2,sp", "reduce-in-compute-dtype"},
                                         std::pair{"dp=2,tp=2,mb=2", "accumulate-in-compute-dtype"}}) {
    const CheckReport report = testing::run_check_in_threads(grad_check(layout, c10::kBFloat16, mutation));
    ASSERT_EQ(report.bite.size(), 1u);
    const BiteOutcome& b = report.bite.front();
    EXPECT_TRUE(b.caught) << mutation << ": observed " << b.observed_level << ": " << b.observed_diagnosis;
    EXPECT_EQ(b.observed_level, "grad") << mutation;
    EXPECT_NE(b.observed_diagnosis.find("[reduction]"), std::string::npos) << mutation << ": " << b.observed_diagnosis;
    int failed = 0;
    for (const auto& row : report.rows) {
      if (!row.reduction) {
        EXPECT_TRUE(row.passed) << mutation << " " << row.tensor << ": " << row.diagnosis.text;
      } else if (!row.passed) {
        ++failed;
        EXPECT_NE(row.diagnosis.text.find("it was rounded to bf16"), std::string::npos)
            << mutation << " " << row.tensor << ": " << row.diagnosis.text;
      }
    }
    EXPECT_GE(failed, 1) << mutation;
    EXPECT_EQ(report.exit_code(), 1) << mutation;
  }
}

}  // namespace
}  // namespace magic
