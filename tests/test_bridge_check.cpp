// magic-check on bridge layouts (docs/magic-check.md, "Encoder and language model: the bridge"):
// the multimodal workload (an encoder over patch features, its outputs the GPT's prefix) across
// real rank processes, against the single process that runs both models with no bridge at all.
// Exact at fp64 on every level, encoder parameters included, on fan-in, fan-out and equal layouts;
// each bridge bug caught with its factor on a layout whose sizes differ; a layout or run the
// bridge cannot take exits 2 before any rank starts.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "checks/mutations.h"
#include "checks/planted_bridge.h"
#include "lib/core/strings.h"
#include "tests/support.h"

namespace magic {
namespace {

testing::CommandOutcome magic_check(const std::string& layout, const std::string& flags) {
  // A bridge layout holds a ';': one word for the shell.
  return testing::run_command(str_cat(MAGIC_CHECK_BINARY, " --topology '", layout, "' ", flags));
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

nlohmann::json report_of(const std::string& layout, const std::string& flags, int expected_exit) {
  const std::string json = temp_path("bridge.json");
  const auto o = magic_check(layout, flags + " --json " + json);
  EXPECT_EQ(o.exit_code, expected_exit) << layout << " " << flags << "\n" << o.output;
  return nlohmann::json::parse(testing::read_file(json));
}

// Exact at fp64 on every level, the encoder's rows included.
void expect_exact_on_every_level(const std::string& layout) {
  const auto report = report_of(layout, "", 0);
  std::set<std::string> levels, encoder_levels;
  for (const auto& row : report["checks"]) {
    const std::string level = row["level"], tensor = row["tensor"];
    levels.insert(level);
    if (tensor.rfind("encoder.", 0) == 0) encoder_levels.insert(level);
    EXPECT_LE(row["worst_rel_err"].get<double>(), 1e-9) << layout << " " << row.dump();
  }
  const std::set<std::string> all{"grad", "optimizer", "query_grad", "hvp", "replay", "final_params", "scores"};
  EXPECT_EQ(levels, all) << layout;
  // Every per-parameter level has the encoder's rows (hvp and scores are whole-model rows).
  EXPECT_EQ(encoder_levels, (std::set<std::string>{"grad", "optimizer", "query_grad", "replay", "final_params"}))
      << layout;
}

// Parameters sharded on both sides, fan-in (with tp on both sides and cp) and fan-out: the clip's
// joint norm over two shard groups.
TEST(BridgeCheck, FanInFanOutAndEqualLayoutsAreExactAtFp64OnEveryLevelEncoderIncluded) {
  for (const std::string layout : {"enc=tp2,dp4,fsdp4;lm=tp2,dp2,cp2,fsdp2", "enc=tp2,dp2,fsdp2;lm=dp4,fsdp4"}) {
    expect_exact_on_every_level(layout);
  }
}

// The issue's four layouts: fan-in with tp on both sides and cp, fan-out with cp, fan-in without
// tp, and fan-out without cp (enc=dp2;lm=dp4 has worlds of 2 and 4: the encoder gets tp2). Label
// `long` (long.more_cases): the two sharded layouts above have their fan-in and fan-out.
TEST(BridgeCheckLong, TheIssuesFourLayoutsAreExactAtFp64OnEveryLevel) {
  if (std::getenv("MAGIC_LONG_TESTS") == nullptr) GTEST_SKIP() << "long: ctest --preset long";
  for (const std::string layout :
       {"enc=tp2,dp4;lm=tp2,dp2,cp2", "enc=tp4,dp2;lm=tp1,dp4,cp2", "enc=dp4;lm=dp2,cp2", "enc=tp2,dp2;lm=dp4"}) {
    expect_exact_on_every_level(layout);
  }
}

// In bf16 against the fp64 golden run, no false alarm on a 4-rank fan-in with encoder tp and lm
// cp (the seed layouts' bf16 runs are the long bite's clean runs).
TEST(BridgeCheck, Bf16RunsPassAgainstTheFp64GoldenRun) {
  const auto o = magic_check("enc=tp2,dp2;lm=dp2,cp2", "--dtype bf16 --steps 2");
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

// The bridge's bugs and the loss normalized over dp only, each where its factor is its own: lm dp
// 2 and cp 4 (fan-in), lm dp 4 and cp 2 (fan-out). The failing rows are the encoder's, at grad;
// the first divergence is an encoder parameter's gradient in step 0's backward (the dump places
// the encoder's records on its own grid). The loss over dp only changes every gradient, the
// language model's first in backward order.
TEST(BridgeCheck, EachBridgeBugIsCaughtAtGradOnTheEncodersRowsWithItsFactor) {
  struct Case {
    std::string mutation, layout, diagnosis;
  };
  for (const Case& c : {Case{"bridge-no-intra-cp-sum", "enc=tp2,dp4;lm=dp2,cp4", "terms missing or extra"},
                        Case{"bridge-fan-in-wrong-offset", "enc=tp2,dp4;lm=dp2,cp4", "terms missing or extra"},
                        Case{"bridge-fan-out-pooled-over-cp", "enc=tp4,dp2;lm=dp4,cp2", "x cp (scale 2.000000)"},
                        Case{"cp-dp-only-normalizer", "enc=tp2,dp4;lm=dp2,cp4", "x cp"}}) {
    const auto report = report_of(c.layout, "--steps 2 --checks grad --mutate " + c.mutation, 1);
    bool encoder_failed = false;
    for (const auto& row : report["checks"]) {
      const std::string tensor = row["tensor"];
      if (tensor.rfind("encoder.", 0) != 0 || row["verdict"] == "pass") continue;
      encoder_failed = true;
      EXPECT_NE(row["diagnosis"].get<std::string>().find(c.diagnosis), std::string::npos)
          << c.mutation << " " << row.dump();
    }
    EXPECT_TRUE(encoder_failed) << c.mutation << " on " << c.layout;
    const std::string first = report["first_divergence"];
    const bool in_the_bridge = c.mutation.rfind("bridge-", 0) == 0;
    EXPECT_EQ(first.find("first divergence: step 0, backward, encoder.") == 0, in_the_bridge)
        << c.mutation << ": " << first;
  }
}

// The default suite's bite on a bridge: the fan-in layout of distinct sizes, every applicable
// mutation that shows at grad (the lm side's mesh bugs and the bridge's) caught with its level and
// factor. The whole bite, every level, is long (BridgeBiteLong).
TEST(BridgeCheck, BiteOnAFanInLayoutCatchesEveryApplicableMutation) {
  const std::string layout = "enc=tp2,dp4;lm=dp2,cp4";
  const auto report = report_of(layout, "--steps 2 --checks grad --bite", 0);
  const auto plan = checks::plan_bite(dist::TopologySpec::parse(layout), {checks::Level::kGrad});
  ASSERT_EQ(report["bite"].size(), plan.run.size());
  std::set<std::string> ran;
  for (const auto& b : report["bite"]) {
    ran.insert(b["mutation"].get<std::string>());
    EXPECT_TRUE(b["caught"].get<bool>()) << b.dump();
  }
  EXPECT_EQ(ran.count("bridge-no-intra-cp-sum"), 1u);
  EXPECT_EQ(ran.count("bridge-fan-in-wrong-offset"), 1u);
}

// The fan-out slice taken from the cp = 0 view hands cp > 0 ranks the whole shard: where a real
// bridge hangs in its next collective, the rank fails at once, naming its phase and both shapes,
// and the run ends with exit 1 well within the collective timeout (20 s here). --bite cannot go
// on from a failed run, so it lists the mutation as skipped, pointing at --mutate.
TEST(BridgeCheck, AFanOutSliceFromTheCpZeroViewEndsAsANamedRankFailureWithinTheTimeout) {
  const std::string layout = "enc=tp4,dp2;lm=dp4,cp2";
  const auto started = std::chrono::steady_clock::now();
  const auto o = magic_check(layout, "--timeout 20 --mutate bridge-fan-out-cp0-slice");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_LT(seconds, 25.0) << o.output;
  EXPECT_NE(o.output.find("in phase 'step gradients at step 0'"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("gpt_forward: a prefix shaped [6, 2, 16] does not fit the input ids [3, 12]"),
            std::string::npos)
      << o.output;
  const auto plan = checks::plan_bite(dist::TopologySpec::parse(layout), checks::all_levels());
  bool skipped = false;
  for (const auto& skip : plan.skipped) {
    if (skip.mutation == "bridge-fan-out-cp0-slice") skipped = skip.reason.find("--mutate") != std::string::npos;
  }
  EXPECT_TRUE(skipped);
}

// Each refusal names the input and exits 2 before any rank starts, leaving no report behind.
TEST(BridgeCheck, WhatABridgeCannotTakeExitsTwoNamingTheInput) {
  struct Case {
    std::string layout, flags, message;
  };
  for (const Case& c : {Case{"enc=tp2,dp4;lm=tp2,dp2,cp2", "--batch 6", "6 rows cannot be split by both sides"},
                        Case{"enc=tp2,dp4;lm=tp2,dp2,cp2", "--convention avg", "--convention avg: a bridge layout"},
                        Case{"enc=tp2,dp4;lm=tp2,dp2", "", "one world"},
                        Case{"enc=tp2,dp3;lm=tp3,dp2", "", "neither dp divides the other"}}) {
    const std::string json = temp_path("refused.json");
    const auto o = magic_check(c.layout, c.flags + " --json " + json);
    EXPECT_EQ(o.exit_code, 2) << c.layout << " " << c.flags << "\n" << o.output;
    EXPECT_NE(o.output.find(c.message), std::string::npos) << o.output;
    EXPECT_FALSE(std::filesystem::exists(json)) << c.layout;
  }
}

// The bite on the issue's two seed layouts, on the fan-out layout whose sizes differ, and on the
// seed layouts with parameters sharded on both sides, in fp64 and bf16: every applicable mutation
// caught with its level and factor, the bridge's among them.
// Label `long` (ctest --preset long runs it with MAGIC_LONG_TESTS=1, about a minute a case).
using LayoutAndDtype = std::pair<std::string, std::string>;
class BridgeBiteLong : public ::testing::TestWithParam<LayoutAndDtype> {};

TEST_P(BridgeBiteLong, EveryApplicableMutationIsCaughtWithItsLevelAndFactor) {
  if (std::getenv("MAGIC_LONG_TESTS") == nullptr) GTEST_SKIP() << "long: ctest --preset long";
  const auto& [layout, dtype] = GetParam();
  const auto report = report_of(layout, "--bite --dtype " + dtype, 0);
  std::printf("  %s %s: %zu mutations run, %zu skipped\n", layout.c_str(), dtype.c_str(), report["bite"].size(),
              report["bite_skipped"].size());
  std::set<std::string> ran;
  for (const auto& b : report["bite"]) {
    ran.insert(b["mutation"].get<std::string>());
    EXPECT_TRUE(b["caught"].get<bool>()) << b.dump();
  }
  const auto topology = dist::TopologySpec::parse(layout);
  for (const auto& m : checks::bridge_mutations()) {
    // Every bridge mutation that applies runs, but the one that ends the run (--mutate checks it).
    if (m.unmet(topology.bridge()).empty() && !m.ends_the_run) {
      EXPECT_EQ(ran.count(m.name), 1u) << m.name << " on " << layout;
    }
  }
  // And the clip's joint norm, planted on both meshes, where the encoder shards its parameters.
  if (topology.bridge().encoder.fsdp > 1) {
    EXPECT_EQ(ran.count("bridge-clip-squares-all-reduced"), 1u) << layout;
  }
}

INSTANTIATE_TEST_SUITE_P(SeedLayouts, BridgeBiteLong,
                         ::testing::Values(LayoutAndDtype{"enc=tp2,dp4;lm=tp2,dp2,cp2", "fp64"},
                                           LayoutAndDtype{"enc=tp2,dp4;lm=tp2,dp2,cp2", "bf16"},
                                           LayoutAndDtype{"enc=tp4,dp2;lm=tp1,dp4,cp2", "fp64"},
                                           LayoutAndDtype{"enc=tp4,dp2;lm=tp1,dp4,cp2", "bf16"},
                                           LayoutAndDtype{"enc=tp4,dp2;lm=dp4,cp2", "fp64"},
                                           LayoutAndDtype{"enc=tp4,dp2;lm=dp4,cp2", "bf16"},
                                           LayoutAndDtype{"enc=tp2,dp4,fsdp4;lm=tp2,dp2,cp2,fsdp2", "fp64"},
                                           LayoutAndDtype{"enc=tp2,dp4,fsdp4;lm=tp2,dp2,cp2,fsdp2", "bf16"},
                                           LayoutAndDtype{"enc=tp4,dp2,fsdp2;lm=tp1,dp4,cp2,fsdp4", "fp64"},
                                           LayoutAndDtype{"enc=tp4,dp2,fsdp2;lm=tp1,dp4,cp2,fsdp4", "bf16"}),
                         [](const auto& info) {
                           return testing::test_name(info.param.first + "_" + info.param.second);
                         });

}  // namespace
}  // namespace magic
