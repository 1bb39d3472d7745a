// The precision policy: its shorthands, the JSON forms and their errors, unit roundoffs, and
// how a run config reads "dtype".
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lib/core/json_fields.h"
#include "lib/core/precision_policy.h"
#include "tests/support.h"

namespace magic {
namespace {

TEST(PrecisionPolicy, ShorthandsKeepMasterWeightsAndReductionInFp32) {
  const auto bf16 = PrecisionPolicy::for_compute(c10::kBFloat16);
  EXPECT_EQ(bf16.compute, c10::kBFloat16);
  EXPECT_EQ(bf16.master, c10::kFloat);
  EXPECT_EQ(bf16.reduce, c10::kFloat);
  EXPECT_EQ(bf16.loss_scale, 1.0);
  const auto fp16 = PrecisionPolicy::for_compute(c10::kHalf);
  EXPECT_EQ(fp16.master, c10::kFloat);
  EXPECT_EQ(fp16.loss_scale, 1024.0);
  const auto fp64 = PrecisionPolicy::for_compute(c10::kDouble);
  EXPECT_EQ(fp64, PrecisionPolicy{});
  EXPECT_FALSE(fp64.low_precision());
  EXPECT_TRUE(PrecisionPolicy::for_compute(c10::kFloat).low_precision());  // judged against fp64 too
  EXPECT_EQ(bf16.str(), "bf16");
}

// The policy a config's "dtype" gives: `value` read as the "dtype" of a config from run.json.
PrecisionPolicy policy_of(const nlohmann::json& value) {
  const nlohmann::json config = {{"dtype", value}};
  return PrecisionPolicy::from_json(JsonFields(config, "run.json"), "dtype", "fp64");
}

TEST(PrecisionPolicy, ObjectFormOverridesTheShorthand) {
  const auto p = policy_of({{"compute", "fp16"}, {"reduce", "fp16"}, {"loss_scale", 256}});
  EXPECT_EQ(p.compute, c10::kHalf);
  EXPECT_EQ(p.master, c10::kFloat);
  EXPECT_EQ(p.reduce, c10::kHalf);
  EXPECT_EQ(p.loss_scale, 256.0);
  EXPECT_EQ(p.str(), "fp16 compute, fp32 master, fp16 reduce, loss scale 256");
  EXPECT_EQ(policy_of("bf16"), PrecisionPolicy::for_compute(c10::kBFloat16));
}

TEST(PrecisionPolicy, PoliciesNoTrainerRunsAreRefusedNamingTheField) {
  auto error = [](const nlohmann::json& j) { return testing::input_error_of([&] { policy_of(j); }); };
  EXPECT_NE(error("fp8").find("unknown dtype 'fp8'"), std::string::npos);
  EXPECT_NE(error({{"compute", "bf16"}, {"master", "bf16"}}).find("master dtype bf16"), std::string::npos);
  EXPECT_NE(error({{"compute", "fp32"}, {"master", "fp32"}, {"reduce", "fp64"}}).find("reduce dtype fp64"),
            std::string::npos);
  EXPECT_NE(error({{"compute", "fp16"}, {"loss_scale", 1000}}).find("power of two"), std::string::npos);
  EXPECT_NE(error({{"compute", "fp16"}, {"loss_scale", -2}}).find("power of two"), std::string::npos);
  EXPECT_NE(error({{"compute", "fp16"}, {"scale", 2}}).find("scale"), std::string::npos);  // unknown key
  EXPECT_NE(error(3).find("expected a dtype name"), std::string::npos);
  EXPECT_NE(error("fp8").find("run.json: dtype"), std::string::npos);
}

// The machine epsilon measured by rounding: the smallest power of two e with 1 + e != 1.
double measured_epsilon(c10::ScalarType dtype) {
  double e = 1.0;
  while ((at::ones({1}, at::kDouble) + e / 2).to(dtype).to(at::kDouble).item<double>() != 1.0) e /= 2;
  return e;
}

TEST(PrecisionPolicy, UnitRoundoffIsHalfTheMachineEpsilon) {
  for (c10::ScalarType dtype : {c10::kDouble, c10::kFloat, c10::kBFloat16, c10::kHalf}) {
    EXPECT_EQ(unit_roundoff(dtype), measured_epsilon(dtype) / 2) << c10::toString(dtype);
  }
}

TEST(PrecisionPolicy, RunConfigReadsDtypeAsAPolicy) {
  nlohmann::json j = testing::tiny_run_json({});
  j["dtype"] = "bf16";
  const RunConfig bf16 = RunConfig::from_json(j, "tiny-run", testing::source_path("fixtures"));
  EXPECT_EQ(bf16.precision, PrecisionPolicy::for_compute(c10::kBFloat16));
  const LmProblem problem = build_lm_problem(bf16);
  EXPECT_EQ(problem.initial.params.at("tok_emb").scalar_type(), c10::kFloat);  // master weights
  EXPECT_EQ(problem.weights.scalar_type(), c10::kFloat);
  j["dtype"] = {{"compute", "fp16"}, {"loss_scale", 3}};
  const std::string error =
      testing::input_error_of([&] { RunConfig::from_json(j, "tiny-run", testing::source_path("fixtures")); });
  EXPECT_NE(error.find("tiny-run: dtype: loss_scale 3"), std::string::npos) << error;
}

}  // namespace
}  // namespace magic
