// "checkpoints": {"budget": SIZE} through magic-run: the run names the plan it chose, holds no
// more states than the budget, and gives the sqrt run's scores bit for bit; a budget below the
// least plan, a size that is not one and a misspelt key are refused by name, exit 2.
#include <gtest/gtest.h>

#include <regex>

#include "lib/core/byte_size.h"
#include "lib/core/error.h"
#include "lib/io/safetensors.h"
#include "lib/train/memory_estimate.h"
#include "tests/support.h"

namespace magic {
namespace {

using testing::fresh_dir;
using testing::magic_run;

TEST(ByteSize, ReadsBinaryUnitsAndRefusesAnythingElseByName) {
  EXPECT_EQ(parse_byte_size("4096", "x"), 4096);
  EXPECT_EQ(parse_byte_size("256MiB", "x"), 256 << 20);
  EXPECT_EQ(parse_byte_size("1.5 GiB", "x"), 3LL << 29);
  EXPECT_EQ(parse_byte_size("2KiB", "x"), 2048);
  EXPECT_EQ(parse_byte_size("1TiB", "x"), 1LL << 40);
  for (const std::string bad : {"256MB", "-1", "MiB", "", "nan", "1e30 TiB", " 5", "5 parsecs"}) {
    try {
      parse_byte_size(bad, "training.checkpoints.budget");
      ADD_FAILURE() << "'" << bad << "' was read";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("training.checkpoints.budget: "), std::string::npos) << e.what();
    }
  }
}

std::string budget_config(const std::string& name, const nlohmann::json& checkpoints) {
  return testing::write_tiny_run_config(name, {}, [&](nlohmann::json& j) {
    j["optimizer"] = {{"name", "adamw"}, {"lr", 0.01}};
    j["training"]["steps"] = 12;
    j["training"]["checkpoints"] = checkpoints;
  });
}

TEST(CheckpointBudget, ARunWithinABudgetGivesTheSqrtScoresAndHoldsNoMore) {
  const std::string sqrt_config = budget_config("budget-sqrt", "sqrt");
  const std::string sqrt_out = fresh_dir("budget-sqrt");
  const testing::CommandOutcome sqrt_run = magic_run("--config " + sqrt_config + " --top 0 --out " + sqrt_out);
  ASSERT_EQ(sqrt_run.exit_code, 0) << sqrt_run.output;
  const int64_t state = estimate_state_bytes(RunConfig::load(sqrt_config));
  // 4 states: one checkpoint... or two with a slot each; both recompute more than sqrt's 12 − 6.
  const std::string config = budget_config("budget-4", {{"budget", std::to_string(4 * state + state / 2)}});
  const std::string out = fresh_dir("budget-4");
  const testing::CommandOutcome o = magic_run("--config " + config + " --top 0 --out " + out);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::smatch plan, held;
  const std::string& text = o.output;
  ASSERT_TRUE(std::regex_search(text, plan,
                                std::regex("checkpoints within a [0-9.]+ KiB budget \\(4 states: "
                                           "([0-9]+) checkpoints, ([0-9]+) more a segment; ([0-9]+) "
                                           "steps recomputed\\)")))
      << text;
  EXPECT_EQ(std::stoll(plan[1]) + std::stoll(plan[2]) + 2, 4);
  EXPECT_GT(std::stoll(plan[3]), 12 - 6);
  ASSERT_TRUE(std::regex_search(text, held, std::regex("at most ([0-9]+) states held"))) << text;
  EXPECT_LE(std::stoll(held[1]), 4);
  const at::Tensor a = load_safetensors(sqrt_out + "/scores.safetensors").tensors.at("scores");
  const at::Tensor b = load_safetensors(out + "/scores.safetensors").tensors.at("scores");
  EXPECT_TRUE(at::equal(a, b)) << "max |difference| " << (a - b).abs().max().item<double>();
  std::filesystem::remove_all(sqrt_out);
  std::filesystem::remove_all(out);
}

TEST(CheckpointBudget, BadBudgetsAreRefusedByName) {
  const RunConfig probe = RunConfig::load(budget_config("budget-probe", "sqrt"));
  const int64_t state = estimate_state_bytes(probe);
  struct Case {
    nlohmann::json checkpoints;
    std::string fragment;
  };
  for (const Case& c : std::vector<Case>{
           {{{"budget", std::to_string(2 * state)}},
            "training.checkpoints.budget: " + format_bytes(2.0 * static_cast<double>(state)) + " holds 2 states of " +
                format_bytes(static_cast<double>(state)) + "; a budget needs at least 3 (" +
                format_bytes(3.0 * static_cast<double>(state)) + ")"},
           {{{"budget", "256MB"}}, "training.checkpoints.budget: expected a size such as \"256MiB\""},
           {{{"budjet", "256MiB"}}, "budjet"},
           {nlohmann::json::object(), "training.checkpoints.budget"},
       }) {
    const testing::CommandOutcome o = magic_run("--config " + budget_config("budget-bad", c.checkpoints) + " --top 0");
    EXPECT_EQ(o.exit_code, 2) << c.checkpoints.dump() << "\n" << o.output;
    EXPECT_NE(o.output.find(c.fragment), std::string::npos) << c.checkpoints.dump() << "\n" << o.output;
    EXPECT_EQ(o.output.find("training:"), std::string::npos) << "trained before refusing\n" << o.output;
  }
}

}  // namespace
}  // namespace magic
