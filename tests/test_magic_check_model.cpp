// magic-check --model DIR: the built-in workload trains a model folder (its architecture, weights
// and tokenizer), so every distributed check and every catalog mutation of --bite runs on the
// user's own architecture: GPT-NeoX (rotary positions, parallel residual) and GPT-2 (learned
// positions, tied head).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "tests/support.h"

namespace magic {
namespace {

testing::CommandOutcome magic_check(const std::string& args) {
  return testing::run_command(std::string(MAGIC_CHECK_BINARY) + " " + args);
}

std::string model(const std::string& name) {
  return testing::source_path("fixtures/models/" + name);
}

TEST(MagicCheckModel, EveryCatalogMutationIsCaughtOnANeoxFolder) {
  const std::string json = ::testing::TempDir() + "/model-bite.json";
  const auto o = magic_check("--model " + model("neox-tiny") + " --topology dp=2,cp=2,fsdp=2 --bite --json " + json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("lm workload on model " + model("neox-tiny")), std::string::npos) << o.output;
  const auto report = nlohmann::json::parse(testing::read_file(json));
  EXPECT_EQ(report["model"], model("neox-tiny"));
  ASSERT_GE(report["bite"].size(), 16u);
  for (const auto& b : report["bite"]) {
    EXPECT_TRUE(b["caught"].get<bool>()) << b.dump();
    EXPECT_EQ(b["observed"]["level"], b["expected"]["level"]) << b.dump();
  }
  std::remove(json.c_str());
}

TEST(MagicCheckModel, AGpt2FolderPassesWithItsOwnParameters) {
  const std::string json = ::testing::TempDir() + "/model-gpt2.json";
  const auto o = magic_check("--model " + model("gpt2-tiny") + " --topology dp=3,cp=2 --json " + json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const auto report = nlohmann::json::parse(testing::read_file(json));
  std::set<std::string> tensors;
  for (const auto& row : report["checks"]) tensors.insert(row["tensor"].get<std::string>());
  EXPECT_TRUE(tensors.count("pos_emb")) << "GPT-2's learned positions are checked";
  EXPECT_FALSE(tensors.count("head.weight")) << "GPT-2's head is tied to tok_emb";
  std::remove(json.c_str());
}

TEST(MagicCheckModel, ABadFolderOrAConflictingFlagIsRefusedBeforeAnyRank) {
  struct Case {
    std::string args, expected;
  };
  const std::string config = testing::write_tiny_run_config("model-conflict", {});
  const std::vector<Case> cases = {
      {"--model /nonexistent/folder --topology dp=2", "/nonexistent/folder"},
      {"--model " + model("neox-tiny") + " --config " + config + " --topology dp=2", "--model: comes from --config"},
      {"--model " + model("neox-tiny") + " --topology n_ci=2,n_per_block=2", "--model"},
  };
  for (const auto& c : cases) {
    const auto o = magic_check(c.args);
    EXPECT_EQ(o.exit_code, 2) << c.args << "\n" << o.output;
    EXPECT_NE(o.output.find(c.expected), std::string::npos) << c.args << "\n" << o.output;
    EXPECT_EQ(o.output.find("rank 0"), std::string::npos) << "started ranks: " << o.output;
  }
}

}  // namespace
}  // namespace magic
