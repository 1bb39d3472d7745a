// magic-run end to end as a user runs it: bad inputs exit 2 with a message naming the input;
// a good run writes its score files and nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lib/io/safetensors.h"
#include "tests/support.h"

namespace magic {
namespace {

using Outcome = testing::CommandOutcome;

Outcome run_magic_run(const std::string& args) {
  return testing::run_command(std::string(MAGIC_RUN_BINARY) + " " + args);
}

// Writes a config derived from the tiny test run with `edit` applied.
std::string config_with(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = testing::tiny_run_json({});
  j["data"]["train"] = testing::source_path("fixtures/text/proverbs.jsonl");
  j["data"]["queries"] = testing::source_path("fixtures/text/queries.jsonl");
  edit(j);
  const std::string path = ::testing::TempDir() + "/" + name + ".json";
  std::ofstream(path) << j.dump(2);
  return path;
}

void expect_bad_input(const std::string& args, const std::string& fragment) {
  Outcome o = run_magic_run(args);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find(fragment), std::string::npos) << "expected '" << fragment << "' in:\n" << o.output;
}

TEST(MagicRunCli, BadInputsExitTwoWithAClearMessage) {
  expect_bad_input("--config /nonexistent.json", "/nonexistent.json: cannot open JSON file");
  expect_bad_input("--config x.json --bogus-flag", "bogus-flag");
  expect_bad_input("--config " + config_with("few", [](nlohmann::json& j) { j["training"]["batch_size"] = 5000; }),
                   "too few examples for one batch");
  expect_bad_input("--config " + config_with("len", [](nlohmann::json& j) { j["model"]["max_len"] = 1; }),
                   "max_len: expected >= 2");
  expect_bad_input("--config " + config_with("heads", [](nlohmann::json& j) { j["model"]["n_heads"] = 3; }),
                   "d_model 8 must be divisible by n_heads 3");
  expect_bad_input("--config " + config_with("opt", [](nlohmann::json& j) { j["optimizer"]["name"] = "lion"; }),
                   "unknown optimizer 'lion'; expected one of sgd, adam, adamw");
  expect_bad_input("--config " + config_with("sched",
                                             [](nlohmann::json& j) {
                                               j["optimizer"]["schedule"] = {{"name", "step"}};
                                             }),
                   "unknown schedule 'step'");
  expect_bad_input("--config " + config_with("type", [](nlohmann::json& j) { j["training"]["steps"] = "ten"; }),
                   "training.steps: expected an integer, got string");
  expect_bad_input("--config " + config_with("ckpt", [](nlohmann::json& j) { j["training"]["checkpoints"] = "half"; }),
                   "unknown checkpoint schedule 'half'");
  const std::string bad_jsonl = ::testing::TempDir() + "/broken.jsonl";
  std::ofstream(bad_jsonl) << "{\"id\": 1, \"text\": \"fine\"}\n{\"id\": 2, \"text\": \"fine\"}\n{not json}\n";
  expect_bad_input("--config " + config_with("jsonl", [&](nlohmann::json& j) { j["data"]["train"] = bad_jsonl; }),
                   "broken.jsonl:3: malformed JSON line");
  // A pasted example with a comment: file, line and column, not the parser's raw text.
  const std::string commented = ::testing::TempDir() + "/commented.json";
  std::ofstream(commented) << "{\n  \"training\": {\n    // steps\n    \"steps\": 4\n  }\n}\n";
  expect_bad_input("--config " + commented, commented + ": invalid JSON at line 3, column 5");
  // Directories where files belong.
  const std::string folder = ::testing::TempDir() + "/a-folder";
  std::filesystem::create_directories(folder);
  expect_bad_input("--config " + folder, folder + ": is a directory, expected a JSON file");
  expect_bad_input("--config " + config_with("dirdata", [&](nlohmann::json& j) { j["data"]["train"] = folder; }),
                   folder + ": is a directory, expected a data file");
}

// Flags and the output directory are checked before the config is even loaded: each exits 2 at
// once, naming the flag, with nothing trained and nothing created.
TEST(MagicRunCli, BadFlagsExitTwoBeforeTraining) {
  const std::string config = config_with("flags", [](nlohmann::json&) {});
  const std::string file = ::testing::TempDir() + "/not-a-directory";
  std::ofstream(file) << "x";
  for (const auto& [args, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"--top -3", "--top -3: expected a count >= 0"},
           {"--query 1", "--query 1: needs --per-query"},
           {"--per-query --query -1", "--query -1: expected an index >= 0"},
           {"--out " + file, "--out " + file + ": is a file; expected a directory"},
           {"--out " + file + "/scores", "is a file; cannot create a directory under it"},
           // Writable to access() for root, but nothing can be made there.
           {"--out /proc/magic-out", "--out /proc/magic-out: cannot create it in /proc"},
           {"--validate shapley", "--validate shapley: expected lds"},
           {"--validate lds --subsets 1", "--subsets 1: expected at least 2 subsets"},
           {"--validate lds --drop-fraction 1.5", "--drop-fraction 1.5: expected a fraction in (0, 1)"},
           {"--subsets 8", "--subsets and --drop-fraction: need --validate lds"},
           {"--html", "--html: needs --out"},
           {"--topology dp=0", "dp=0"},
           {"--topology dp=2 --launch ssh", "--launch ssh: expected spawn or env"}}) {
    Outcome o = run_magic_run("--config " + config + " " + args);
    EXPECT_EQ(o.exit_code, 2) << args << "\n" << o.output;
    EXPECT_NE(o.output.find(fragment), std::string::npos) << args << "\n" << o.output;
    EXPECT_EQ(o.output.find("examples from"), std::string::npos) << "trained despite " << args;
  }
}

// A run that cannot fit in memory is refused before anything is built, with the estimate, what is
// available and the keys that change it (a billion-step config used to grow to 24 GB first).
TEST(MagicRunCli, ARunThatCannotFitIsRefusedWithTheFigures) {
  const std::string config = config_with("huge", [](nlohmann::json& j) { j["training"]["steps"] = 1000000000000; });
  Outcome o = run_magic_run("--config " + config);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("training.steps 1000000000000 with sqrt checkpoints needs about "), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find(" available; lower training.steps"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("examples from"), std::string::npos) << o.output;
}

// A run whose training diverges stops at the first non-finite value with exit 1, naming the step
// and the tensor, and writes no score files.
TEST(MagicRunCli, ADivergentRunStopsNamingTheStepAndWritesNothing) {
  const std::string out = ::testing::TempDir() + "/magic-run-divergent";
  std::filesystem::remove_all(out);
  const std::string config = config_with("divergent", [](nlohmann::json& j) {
    j["optimizer"] = {{"name", "sgd"}, {"lr", 1e300}};
  });
  Outcome o = run_magic_run("--config " + config + " --out " + out);
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("magic-run: stopped: training step "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(" is not finite ("), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("no scores written"), std::string::npos) << o.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/scores.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(out + "/scores.tsv"));
}

TEST(MagicRunCli, AGoodRunPrintsRankedExamplesAndWritesScoreFiles) {
  const std::string out = ::testing::TempDir() + "/magic-run-out";
  std::filesystem::remove_all(out);
  Outcome o = run_magic_run("--config " + config_with("good", [](nlohmann::json&) {}) + " --out " + out + " --top 2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("estimated time: training about "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("training: 6 steps in "), std::string::npos) << o.output;  // progress summaries
  EXPECT_NE(o.output.find("REPLAY: 6 steps in "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("Most helpful"), std::string::npos);
  EXPECT_NE(o.output.find("Most harmful"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/scores.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(out + "/scores.tsv"));
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    EXPECT_EQ(e.path().string().find(".partial"), std::string::npos) << e.path();
  }
}

// fp16 on the CPU (ops without fp16 kernels run widened), scores written in the master dtype;
// a bad policy exits 2 naming the field.
TEST(MagicRunCli, Fp16RunsOnTheCpuAndWritesFp32Scores) {
  const std::string out = ::testing::TempDir() + "/magic-run-fp16";
  std::filesystem::remove_all(out);
  Outcome o = run_magic_run("--config " + config_with("fp16", [](nlohmann::json& j) { j["dtype"] = "fp16"; }) +
                            " --out " + out + " --top 2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("sqrt checkpoints, fp16"), std::string::npos) << o.output;
  const at::Tensor scores = load_safetensors(out + "/scores.safetensors").tensors.at("scores");
  EXPECT_EQ(scores.scalar_type(), c10::kFloat);
  EXPECT_TRUE(scores.isfinite().all().item<bool>());
  expect_bad_input("--config " + config_with("policy",
                                             [](nlohmann::json& j) {
                                               j["dtype"] = {{"compute", "bf16"}, {"master", "bf16"}};
                                             }),
                   "dtype: master dtype bf16");
}

}  // namespace
}  // namespace magic
