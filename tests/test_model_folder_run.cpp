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

// Fine-tuning on prompt/completion pairs, packed, with four of them held out as queries: only
// completion tokens carry loss, so a per-token score is exactly 0 wherever the label is a prompt's
// (or padding); and the distributed runs still give the single process's scores.
TEST(ModelFolderRun, PairsScoreOnlyCompletionTokensAndDistributeExactly) {
  const std::string config = testing::write_tiny_run_config("pairs", {}, [](nlohmann::json& j) {
    j["model"] = {{"path", testing::source_path("fixtures/models/gpt2-tiny")}, {"max_len", 16}};
    j["data"] = {{"train", testing::source_path("fixtures/text/qa_pairs.jsonl")},
                 {"queries", {{"slice", {0, 4}}}},
                 {"format", "prompt_completion"},
                 {"fit", "pack"}};
    j["training"]["weights"] = "per_token";
    j["training"]["steps"] = 8;  // one epoch of the 31 rows: every row is trained on
    j["optimizer"] = {{"name", "adamw"}, {"lr", 0.01}};
  });
  const LmProblem p = build_lm_problem(RunConfig::load(config));
  ASSERT_EQ(p.query_documents.size(), 4u);
  EXPECT_EQ(p.query_documents[3].id, "qa03");
  ASSERT_EQ(p.train_documents.size(), 20u);
  EXPECT_EQ(p.train_documents[0].id, "qa04") << "the query slice is held out of training";
  EXPECT_TRUE(p.train->packed);

  const std::string single = fresh_dir("pairs-single");
  testing::CommandOutcome o = magic_run("--config " + config + " --out " + single);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("(20 documents packed into rows of 16)"), std::string::npos) << o.output;
  const at::Tensor scores = scores_of(single);  // [rows, positions]: the queries' summed scores
  ASSERT_EQ(scores.sizes(), p.train->labels.sizes());
  // No loss predicts a row's first token, nor a prompt's or padding's ignored label.
  at::Tensor no_label = p.train->labels.eq(kIgnoreLabel);
  no_label.select(1, 0).fill_(true);
  const int64_t prompt_positions = no_label.sum().item<int64_t>();
  ASSERT_GT(prompt_positions, 0);
  EXPECT_EQ(scores.masked_select(no_label).abs().max().item<double>(), 0.0)
      << "a first, prompt or padding position has a score";
  EXPECT_GT(scores.masked_select(no_label.logical_not()).abs().min().item<double>(), 0.0)
      << "a completion token has no score";
  for (const std::string layout : {"dp=2", "cp=2"}) {
    const std::string out = fresh_dir("pairs-" + layout);
    o = magic_run("--config " + config + " --topology " + layout + " --out " + out);
    ASSERT_EQ(o.exit_code, 0) << layout << ": " << o.output;
    EXPECT_LE(testing::relative_error(scores_of(out), scores), 1e-10) << layout;
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
      {"unknown format", "data.format: unknown format 'chat' (expected text or prompt_completion)",
       [](nlohmann::json& j) { j["data"]["format"] = "chat"; }},
      {"text field of pairs", "data.text_field: is for format \"text\"",
       [](nlohmann::json& j) { j["data"]["format"] = "prompt_completion", j["data"]["text_field"] = "body"; }},
      {"pairs without prompts", "missing prompt field 'prompt'",
       [](nlohmann::json& j) { j["data"]["format"] = "prompt_completion", j["data"]["completion_field"] = "text"; }},
      {"slice past the end", "data.queries.slice [370, 380] goes past the 375 documents of",
       [](nlohmann::json& j) {
         j["data"]["queries"] = {{"slice", {370, 380}}};
       }},
      {"empty slice", "data.queries.slice: expected [begin, end]",
       [](nlohmann::json& j) {
         j["data"]["queries"] = {{"slice", {3, 3}}};
       }},
      {"nothing left to train on", "holds out all 375 documents",
       [](nlohmann::json& j) {
         j["data"]["queries"] = {{"slice", {0, 375}}};
       }},
      {"unknown fit", "data.fit: unknown fit 'squeeze'", [](nlohmann::json& j) { j["data"]["fit"] = "squeeze"; }},
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
