// magic-run on a model folder ("model": {"path", "max_len"}): the folder's architecture, weights
// and tokenizer drive the whole pipeline; data parallel, context parallel (rotary angles at the
// global positions) and sharded runs give the single process's scores; what the run is given is
// checked before it starts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lib/io/safetensors.h"
#include "lib/train/run_config.h"
#include "tests/support.h"

namespace magic {
namespace {

std::string folder_config(const std::string& name, const std::string& model, int64_t max_len = 24) {
  return testing::write_tiny_run_config(name, {}, [&](nlohmann::json& j) {
    j["model"] = {{"path", testing::source_path("fixtures/models/" + model)}, {"max_len", max_len}};
    j["optimizer"] = {{"name", "adamw"}, {"lr", 0.01}, {"clip_norm", 1.0}};
  });
}

using testing::fresh_dir;
using testing::magic_run;

at::Tensor scores_of(const std::string& dir) {
  return load_safetensors(dir + "/scores.safetensors").tensors.at("scores");
}

TEST(ModelFolderRun, TheFoldersTokenizerAndWeightsMakeTheProblem) {
  const RunConfig config = RunConfig::load(folder_config("problem", "neox-tiny"));
  const LmProblem p = build_lm_problem(config);
  EXPECT_EQ(p.model.positions, Positions::kRotary);
  EXPECT_EQ(p.model.max_len, 24);
  EXPECT_NE(p.tokenizer->description().find("neox-tiny (tokenizer.json)"), std::string::npos);
  EXPECT_EQ(p.train->pad_id, 1) << "Pythia's <|padding|>";
  // Each document ends with <|endoftext|> (id 0) and its text comes back from the tokens.
  std::string whole;
  int64_t tokens = 0;
  for (int64_t i = 0; i < p.train->size() && p.train->examples[i].document == 0; ++i) {
    whole += example_text(*p.train, i, *p.tokenizer);
    tokens += p.train->examples[i].length;
  }
  EXPECT_EQ(whole, p.train_documents[0].text) << "the chunks of document 0 spell it";
  EXPECT_LT(tokens, static_cast<int64_t>(whole.size())) << "BPE tokens are fewer than bytes";
  const at::Tensor& tok_emb = p.initial.params.at("tok_emb");
  EXPECT_EQ(tok_emb.size(0), 300);
}

TEST(ModelFolderRun, DistributedScoresEqualTheSingleProcessOnes) {
  for (const std::string model : {"neox-tiny", "gpt2-tiny"}) {
    const std::string config = folder_config("run-" + model, model, model == "gpt2-tiny" ? 16 : 24);
    const std::string single = fresh_dir("mf-single-" + model);
    testing::CommandOutcome o = magic_run("--config " + config + " --out " + single);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    const at::Tensor expected = scores_of(single);
    ASSERT_TRUE(expected.isfinite().all().item<bool>());
    for (const std::string layout : {"dp=2", "cp=2", "dp=2,cp=2,fsdp=2"}) {
      const std::string out = fresh_dir("mf-" + model + "-" + layout);
      o = magic_run("--config " + config + " --topology " + layout + " --out " + out);
      ASSERT_EQ(o.exit_code, 0) << model << " " << layout << ": " << o.output;
      const double error = (scores_of(out) - expected).abs().max().item<double>() / expected.abs().max().item<double>();
      std::cout << model << " " << layout << " vs single process: relative error " << error << "\n";
      EXPECT_LE(error, 1e-10) << model << " " << layout;
    }
  }
}

TEST(ModelFolderRun, WhatTheRunIsGivenIsCheckedFirst) {
  struct Case {
    std::string name, expected;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Case> cases = {
      {"too long", "sequences of 40 tokens are longer than the 32 positions",
       [](nlohmann::json& j) { j["model"]["max_len"] = 40; }},
      {"no max_len", "model.max_len", [](nlohmann::json& j) { j["model"].erase("max_len"); }},
      {"size beside the folder", "d_model", [](nlohmann::json& j) { j["model"]["d_model"] = 16; }},
      {"no folder", "not a folder", [](nlohmann::json& j) { j["model"]["path"] = "/nonexistent/model"; }},
  };
  for (const auto& c : cases) {
    nlohmann::json j = nlohmann::json::parse(testing::read_file(folder_config("bad", "neox-tiny")));
    c.edit(j);
    const std::string path = ::testing::TempDir() + "/bad-" + std::to_string(&c - cases.data()) + ".json";
    std::ofstream(path) << j.dump();
    const testing::CommandOutcome o = magic_run("--config " + path + " --out " + fresh_dir("mf-bad"));
    EXPECT_EQ(o.exit_code, 2) << c.name << ": " << o.output;
    EXPECT_NE(o.output.find(c.expected), std::string::npos) << c.name << ": " << o.output;
  }
}

}  // namespace
}  // namespace magic
