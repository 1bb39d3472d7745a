// A row whose distributed, reference or golden tensor holds a NaN or an infinity fails saying
// which tensor is not finite and where (its step, where the row concatenates steps), instead of
// "error vs the policy's reference -nan > bound ..., cosine -nan"; the JSON stays valid and the
// bite judge still judges such a row.
#include <gtest/gtest.h>

#include <limits>

#include "checks/mutations.h"
#include "lib/compare/check_row.h"
#include "lib/compare/reduction_row.h"
#include "lib/core/seed.h"
#include "lib/io/report.h"

namespace magic {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A grad row as the lm workload concatenates it: 4 steps of a [257, 16] gradient.
const StepShape kStep{257, 16};

at::Tensor steps_of_gradients(uint64_t seed) {
  at::Generator gen = make_generator(seed);
  return at::randn({4 * 257 * 16}, gen, at::TensorOptions().dtype(at::kDouble));
}

// The entry [i, j] of step t's gradient in the concatenation.
int64_t at_step(int64_t t, int64_t i, int64_t j) {
  return t * 257 * 16 + i * 16 + j;
}

CheckRow precision_row(const at::Tensor& candidate, const at::Tensor& reference, const at::Tensor& golden,
                       std::optional<double> bound, bool informative_below = false) {
  PrecisionCriterion criterion;
  criterion.k = 4.0;
  criterion.floor = 1e-3;
  criterion.bound = bound;
  if (informative_below) criterion.informative_below = 0.1;
  return make_precision_row("grad", "tok_emb", candidate, reference, golden, criterion, candidate_factors({{"dp", 4}}),
                            0.0, 1e-4, kStep);
}

TEST(NonFiniteRows, ADistributedNanFailsNamingItsStepEntryAndCount) {
  const at::Tensor golden = steps_of_gradients(1), reference = golden * (1 + 1e-3);
  at::Tensor candidate = reference.clone();
  for (int64_t i = 3; i < 15; ++i) candidate[at_step(2, i, 0)] = kNan;  // 12 entries of step 2
  candidate[at_step(3, 0, 5)] = kInf;
  const std::string expected =
      "distributed tensor is not finite at step 2 (NaN at [3, 0] of [257, 16]; 12 of 4112 entries), also at step 3";
  // At shared inputs (a bound on err(D,R)) and downstream (no bound): the latter read
  // "error vs the policy's reference -nan > bound 0.0e+00" before.
  for (std::optional<double> bound : {std::optional<double>(0.05), std::optional<double>()}) {
    const CheckRow row = precision_row(candidate, reference, golden, bound);
    EXPECT_FALSE(row.passed);
    EXPECT_EQ(row.diagnosis.text, expected);
    EXPECT_TRUE(row.diagnosis.factors.empty());
  }
  // Where values are judged only while the policy's own result carries signal (scores), NaN
  // compared false with that test too and the row passed as "not judged": it fails.
  EXPECT_FALSE(precision_row(candidate, reference, golden, std::nullopt, true).passed);
}

TEST(NonFiniteRows, AReferenceOrGoldenThatIsNotFiniteSaysSo) {
  const at::Tensor golden = steps_of_gradients(2), candidate = golden * (1 + 1e-3);
  at::Tensor reference = candidate.clone();
  reference[at_step(0, 256, 15)] = -kInf;
  const CheckRow bad_reference = precision_row(candidate, reference, golden, 0.05);
  EXPECT_FALSE(bad_reference.passed);
  const std::string one_process =
      "; the one-process run is not finite either: it diverges or overflows in this precision on one process too, "
      "whatever the distribution";
  EXPECT_EQ(bad_reference.diagnosis.text,
            "reference tensor is not finite at step 0 (an infinity at [256, 15] of [257, 16]; 1 of 4112 entries)" +
                one_process);
  EXPECT_TRUE(bad_reference.reference_not_finite);
  at::Tensor bad_golden = golden.clone();
  bad_golden[at_step(1, 0, 0)] = kNan;
  const CheckRow row = precision_row(candidate, candidate, bad_golden, 0.05);
  EXPECT_FALSE(row.passed);
  EXPECT_EQ(row.diagnosis.text,
            "golden tensor is not finite at step 1 (NaN at [0, 0] of [257, 16]; 1 of 4112 entries)");
  EXPECT_FALSE(row.reference_not_finite);
  // Both sides diverged: each is named.
  at::Tensor both = candidate.clone();
  both[at_step(0, 256, 15)] = kNan;
  EXPECT_EQ(precision_row(both, reference, golden, 0.05).diagnosis.text,
            "distributed tensor is not finite at step 0 (NaN at [256, 15] of [257, 16]; 1 of 4112 entries); "
            "reference tensor is not finite at step 0 (an infinity at [256, 15] of [257, 16]; 1 of 4112 entries)" +
                one_process);
}

TEST(NonFiniteRows, Fp64AndReductionRowsSayItToo) {
  // A row that is one tensor (no step shape): the index in its own shape.
  const at::Tensor r = at::arange(1, 7, at::kDouble).reshape({2, 3});
  at::Tensor d = r.clone();
  d[1][2] = kInf;
  const CheckRow fp64 = make_check_row("hvp", "theta_0", d, r, 1e-9, candidate_factors({{"dp", 4}}));
  EXPECT_FALSE(fp64.passed);
  EXPECT_EQ(fp64.diagnosis.text, "distributed tensor is not finite (an infinity at [1, 2] of [2, 3]; 1 of 6 entries)");

  const at::Tensor terms = at::arange(1, 9, at::kDouble).reshape({2, 4});  // 2 ranks, 2 steps of [2]
  const ReductionTerms t{terms.sum(0), terms.abs().sum(0), 2, 1.0};
  at::Tensor reduced = terms.sum(0).to(at::kFloat);
  reduced[3] = kNan;
  const CheckRow reduction = make_reduction_row("grad", "w[reduction]", reduced, t, c10::kFloat, c10::kFloat,
                                                candidate_factors({{"dp", 2}}), {2});
  EXPECT_FALSE(reduction.passed);
  EXPECT_EQ(reduction.diagnosis.text, "distributed tensor is not finite at step 1 (NaN at [1] of [2]; 1 of 2 entries)");
}

TEST(NonFiniteRows, TheJsonStaysValidAndTheBiteJudgeStillJudges) {
  const at::Tensor golden = steps_of_gradients(3), reference = golden * (1 + 1e-3);
  at::Tensor candidate = reference.clone();
  candidate[at_step(2, 3, 0)] = kNan;
  CheckReport report;
  report.rows.push_back(precision_row(candidate, reference, golden, 0.05));
  const auto json = nlohmann::json::parse(report_json(report).dump());
  const auto& row = json["checks"][0];
  EXPECT_EQ(row["verdict"], "fail");
  EXPECT_TRUE(row["scale"].is_null());
  EXPECT_TRUE(row["cosine"].is_null());
  EXPECT_TRUE(row["precision"]["candidate_vs_golden"].is_null());
  EXPECT_NE(row["diagnosis"].get<std::string>().find("not finite at step 2"), std::string::npos) << row.dump();
  EXPECT_EQ(json["passed"], false);

  // A mutation expected at grad with no factor is caught by a non-finite grad row; one whose
  // factor the row cannot show (its scale is NaN) is not.
  const checks::Mutation* no_factor = nullptr;
  const checks::Mutation* with_factor = nullptr;
  for (const auto& m : checks::mutation_catalog()) {
    if (m.expected_level != "grad" || m.family == dist::TopologyFamily::kThreePool) continue;
    if (m.expected_factor.empty() && no_factor == nullptr) no_factor = &m;
    if (m.expected_factor == "x dp" && with_factor == nullptr) with_factor = &m;
  }
  ASSERT_NE(no_factor, nullptr);
  ASSERT_NE(with_factor, nullptr);
  const auto dp4 = dist::TopologySpec::parse("dp=4");
  const BiteOutcome caught = checks::judge_mutation(*no_factor, dp4, report.rows);
  EXPECT_TRUE(caught.caught) << caught.observed_diagnosis;
  EXPECT_EQ(caught.observed_level, "grad");
  EXPECT_NE(caught.observed_diagnosis.find("tok_emb: distributed tensor is not finite"), std::string::npos)
      << caught.observed_diagnosis;
  EXPECT_FALSE(checks::judge_mutation(*with_factor, dp4, report.rows).caught);
}

}  // namespace
}  // namespace magic
