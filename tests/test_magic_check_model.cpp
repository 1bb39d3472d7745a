// magic-check --model DIR: the built-in workload trains a model folder (its architecture, weights
// and tokenizer), so every distributed check and every catalog mutation of --bite runs on the
// user's own architecture: GPT-NeoX (rotary positions, parallel residual) and GPT-2 (learned
// positions, tied head).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
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

// Label `long` (long.more_cases): Catalog/EachMutation catches every mutation on the built-in model,
// and MagicCheckModel's other tests run both folders (dp, cp, tp, their own parameters).
TEST(MagicCheckModelLong, EveryCatalogMutationIsCaughtOnANeoxFolder) {
  if (std::getenv("MAGIC_LONG_TESTS") == nullptr) GTEST_SKIP() << "long: ctest --preset long";
  const std::string json = ::testing::TempDir() + "/model-bite.json";
  // Ranks as threads: no first divergence is asserted, and they take half the time of processes.
  const auto o = magic_check("--model " + model("neox-tiny") +
                             " --topology dp=2,cp=2,fsdp=2 --launch threads --bite --json " + json);
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

// Tensor parallelism on a user's folder: NeoX's rotary positions turn each of a rank's whole heads
// as on one process, its parallel residual adds the two row-parallel sums; GPT-2's head is its
// vocabulary-parallel tok_emb. Both pass at fp64, and tp mutations are caught at their level.
TEST(MagicCheckModel, TensorParallelPassesOnANeoxAndAGpt2Folder) {
  struct Case {
    std::string folder, layout;
  };
  for (const Case& c : {Case{"neox-tiny", "tp=2"}, Case{"gpt2-tiny", "dp=2,tp=2"}}) {
    const std::string json = ::testing::TempDir() + "/model-tp.json";
    const auto o = magic_check("--model " + model(c.folder) + " --topology " + c.layout + " --json " + json);
    ASSERT_EQ(o.exit_code, 0) << c.folder << "\n" << o.output;
    EXPECT_NE(o.output.find("PASS: "), std::string::npos) << o.output;
    const auto report = nlohmann::json::parse(testing::read_file(json));
    std::set<std::string> tensors;
    for (const auto& row : report["checks"]) tensors.insert(row["tensor"].get<std::string>());
    EXPECT_TRUE(tensors.count("tok_emb")) << c.folder;
    EXPECT_TRUE(tensors.count("blocks.1.attn.qkv.weight")) << c.folder;
    EXPECT_EQ(tensors.count("head.weight"), c.folder == "neox-tiny" ? 1u : 0u) << c.folder;
    std::remove(json.c_str());
  }
}

// Every mutation that applies on tp=2 (the eight tp ones among them: all but label smoothing's) caught at its level on
// the NeoX folder; on GPT-2 the vocabulary-parallel loss of its tied head planted wrong.
// Label `long` (long.more_cases): Catalog/EachMutation catches each tp mutation on the built-in model,
// and MagicCheckModel.TensorParallelPassesOnANeoxAndAGpt2Folder runs tp on both folders.
TEST(MagicCheckModelLong, TensorParallelMutationsAreCaughtOnModelFolders) {
  if (std::getenv("MAGIC_LONG_TESTS") == nullptr) GTEST_SKIP() << "long: ctest --preset long";
  const std::string json = ::testing::TempDir() + "/model-tp-bite.json";
  auto o = magic_check("--model " + model("neox-tiny") + " --topology tp=2 --bite --json " + json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const auto report = nlohmann::json::parse(testing::read_file(json));
  int tp_mutations = 0;
  for (const auto& b : report["bite"]) {
    EXPECT_TRUE(b["caught"].get<bool>()) << b.dump();
    EXPECT_EQ(b["observed"]["level"], b["expected"]["level"]) << b.dump();
    tp_mutations += b["mutation"].get<std::string>().rfind("tp-", 0) == 0;
  }
  EXPECT_EQ(tp_mutations, 8) << o.output;
  std::remove(json.c_str());

  o = magic_check("--model " + model("gpt2-tiny") + " --topology tp=2 --mutate tp-loss-max-local");
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("FAIL: "), std::string::npos) << o.output;
  const size_t row = o.output.find("\ngrad         tok_emb ");
  ASSERT_NE(row, std::string::npos) << o.output;
  EXPECT_NE(o.output.substr(row, o.output.find('\n', row + 1) - row).find("FAIL"), std::string::npos) << o.output;
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
      // A head count tp does not divide, read from the folder's config.json (or the config's model).
      {"--model " + model("neox-tiny") + " --topology tp=4",
       "--topology dp=1,tp=4: tp=4 does not divide the model's 2 attention heads"},
      {"--model " + model("gpt2-tiny") + " --topology dp=2,tp=3",
       "--topology dp=2,tp=3: tp=3 does not divide the model's 4 attention heads"},
      {"--config " + config + " --topology tp=4", "--topology dp=1,tp=4: tp=4 does not divide the model's 2"},
      // Pipelines (docs/magic-check.md, "Pipeline stages"): the model's layers and the schedule.
      {"--model " + model("gpt2-tiny") + " --topology pp=4,mb=4",
       "--topology dp=1,pp=4,mb=4: pp=4 stages for a model of 2 layers; every stage needs a layer"},
      {"--model " + model("gpt2-tiny") + " --topology pp=2,vpp=2,mb=4",
       "the model's 2 layers do not split into pp·vpp = 2·2 = 4 chunks of equal length"},
      {"--config " + config + " --topology pp=2,mb=2", "pp=2 stages for a model of 1 layer;"},
      {"--topology pp=2", "mb=1 micro-batches are fewer than the pp=2 stages, which 1F1B needs"},
      {"--topology pp=2,vpp=2,mb=3", "mb=3 is not a multiple of pp=2, which the interleaved 1F1B schedule"},
      {"--topology dp=2,vpp=2", "vpp=2 needs pp > 1"},
      {"--topology pp=2,mb=2 --schedule zigzag", "--schedule: unknown schedule 'zigzag'; expected gpipe or 1f1b"},
      // Ring attention cuts a config's sequences (max_len 24) into 2·cp equal chunks.
      {"--config " + config + " --topology cp=5,cp_impl=ring",
       "--topology dp=1,cp=5,cp_impl=ring: ring attention splits each sequence into 2·cp = 10 zig-zag chunks of "
       "equal length, but the config's model max_len = 24 is not a multiple of 10"},
  };
  for (const auto& c : cases) {
    const auto o = magic_check(c.args);
    EXPECT_EQ(o.exit_code, 2) << c.args << "\n" << o.output;
    EXPECT_NE(o.output.find(c.expected), std::string::npos) << c.args << "\n" << o.output;
    EXPECT_EQ(o.output.find("rank 0"), std::string::npos) << "started ranks: " << o.output;
  }
}

// The pipeline's mutations (docs/magic-check.md, "Pipeline stages") bitten on dp=3,pp=2,mb=4 with
// gpt2-tiny's tied head, sizes 3, 2 and 4 all distinct: each caught at its level, the loss divided
// by the micro-batches twice with its factor 1/mb, the detached send by an hvp row first (every
// grad, optimizer and query_grad row passes it). The sum after the reduce-scatter needs fsdp: on
// dp=4,fsdp=2,pp=2,mb=3 it fails the tok_emb gradient (exit 1); the tied embedding's mutations
// are refused by name on the built-in model, whose head is not tied.
TEST(MagicCheckModel, PipelineBiteCatchesEveryPipelineMutationAtItsLevel) {
  const std::string json = ::testing::TempDir() + "/pipeline-bite.json";
  const auto o = magic_check("--model " + model("gpt2-tiny") +
                             " --topology dp=3,pp=2,mb=4 --steps 2 --bite --launch threads --json " + json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const auto report = nlohmann::json::parse(testing::read_file(json));
  std::map<std::string, nlohmann::json> bitten;
  for (const auto& b : report["bite"]) {
    EXPECT_TRUE(b["caught"].get<bool>()) << b.dump();
    bitten[b["mutation"].get<std::string>()] = b;
  }
  const std::map<std::string, std::string> expected_level = {{"pp-embedding-sum-missing", "grad"},
                                                             {"pp-loss-per-micro-batch-twice", "grad"},
                                                             {"pp-send-backward-detached", "hvp"},
                                                             {"pp-norm-one-stage", "optimizer"}};
  for (const auto& [name, level] : expected_level) {
    ASSERT_EQ(bitten.count(name), 1u) << name << "\n" << o.output;
    EXPECT_EQ(bitten[name]["observed"]["level"], level) << bitten[name].dump();
  }
  EXPECT_NE(bitten["pp-loss-per-micro-batch-twice"]["observed"]["factor"].get<std::string>().find("1/mb"),
            std::string::npos)
      << bitten["pp-loss-per-micro-batch-twice"].dump();

  const auto after = magic_check("--model " + model("gpt2-tiny") +
                                 " --topology dp=4,fsdp=2,pp=2,mb=3 --steps 2 --launch threads"
                                 " --mutate pp-embedding-sum-after-reduce-scatter");
  EXPECT_EQ(after.exit_code, 1) << after.output;
  EXPECT_NE(after.output.find("grad         tok_emb"), std::string::npos) << after.output;
  // In processes the first divergence is traced through the stages (docs/dump-format.md, "Pieces
  // some ranks hold"): the tied embedding's copies, each missing the other's term.
  const auto traced = magic_check("--model " + model("gpt2-tiny") +
                                  " --topology dp=3,pp=2,mb=4 --steps 2 --mutate pp-embedding-sum-missing");
  EXPECT_EQ(traced.exit_code, 1) << traced.output;
  EXPECT_NE(traced.output.find("first divergence: step 0, backward, tok_emb gradient, direction differs"),
            std::string::npos)
      << traced.output;
  EXPECT_NE(traced.output.find("partial sums left unreduced over pp (summed over the pp ranks they match); replicas "
                               "differ: pp 1 differs from pp 0"),
            std::string::npos)
      << traced.output;
  const auto untied = magic_check("--topology pp=2,mb=2 --mutate pp-embedding-sum-missing");
  EXPECT_EQ(untied.exit_code, 2) << untied.output;
  EXPECT_NE(untied.output.find("needs a tied head"), std::string::npos) << untied.output;
}

}  // namespace
}  // namespace magic
