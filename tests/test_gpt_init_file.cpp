// model.init: initial parameters from a safetensors file written by Python (stdlib, as the
// safetensors package lays files out; fixtures/golden/make_init_safetensors.py). The oracle is the
// per-tensor sums Python computed from the stored float32 values, kept in the file's metadata.
#include <gtest/gtest.h>

#include <fstream>

#include "lib/core/error.h"
#include "lib/io/safetensors.h"
#include "lib/model/gpt_init_file.h"
#include "tests/support.h"

namespace magic {
namespace {

const std::string kInit = testing::source_path("fixtures/golden/gpt_init_python.safetensors");

GptConfig tiny_model() {
  GptConfig c;
  c.vocab = 257;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.max_len = 24;
  return c;
}

TEST(GptInitFile, AFileWrittenByPythonBecomesTheInitialParameters) {
  testing::TinyRun run;
  nlohmann::json j = testing::tiny_run_json(run);
  j["model"]["init"] = kInit;
  const RunConfig config = RunConfig::from_json(j, "init.json", testing::source_path("fixtures"));
  const LmProblem problem = build_lm_problem(config);
  const auto sums = nlohmann::json::parse(load_safetensors(kInit).metadata.at("sums"));
  ASSERT_EQ(sums.size(), problem.initial.params.size());
  for (const auto& p : problem.initial.params) {
    EXPECT_EQ(p.tensor.scalar_type(), at::kDouble) << p.name;  // converted to the master dtype
    const double python = std::stod(sums.at(p.name).get<std::string>());
    EXPECT_NEAR(p.tensor.sum().item<double>(), python, 1e-12 * (1 + std::abs(python))) << p.name;
  }
  EXPECT_FALSE(
      at::equal(problem.initial.params.at("tok_emb"), gpt_init(config.model, at::kDouble, config.seed).at("tok_emb")));
}

TEST(GptInitFile, AMismatchNamesTheTensor) {
  GptConfig wider = tiny_model();
  wider.d_model = 16;
  EXPECT_NE(testing::input_error_of([&] {
              load_gpt_init(kInit, wider, at::kDouble);
            }).find("tensor 'tok_emb' has shape [257, 8], expected [257, 16] for the model vocab 257, d_model 16"),
            std::string::npos);
  GptConfig deeper = tiny_model();
  deeper.n_layers = 2;
  EXPECT_NE(testing::input_error_of([&] {
              load_gpt_init(kInit, deeper, at::kDouble);
            }).find("no tensor 'blocks.1.ln1.weight'"),
            std::string::npos);

  TensorTree params = load_gpt_init(kInit, tiny_model(), at::kDouble);
  const std::string dir = ::testing::TempDir();
  TensorTree extra = params;
  extra.insert("lm_head.bias", at::zeros({257}, at::kDouble));
  save_safetensors(dir + "/extra.safetensors", extra);
  EXPECT_NE(testing::input_error_of([&] {
              load_gpt_init(dir + "/extra.safetensors", tiny_model(), at::kDouble);
            }).find("tensor 'lm_head.bias' is not a parameter of the model"),
            std::string::npos);
  TensorTree broken = params;
  broken.at("ln_f.bias")[2] = std::nan("");
  save_safetensors(dir + "/nan.safetensors", broken);
  EXPECT_NE(testing::input_error_of([&] {
              load_gpt_init(dir + "/nan.safetensors", tiny_model(), at::kDouble);
            }).find("tensor 'ln_f.bias' has values that are not finite"),
            std::string::npos);
}

// From the command line: a mismatch exits 2 naming the tensor, before training.
TEST(GptInitFile, MagicRunExitsTwoOnAMismatchedInit) {
  nlohmann::json j = testing::tiny_run_json({});
  j["data"]["train"] = testing::source_path("fixtures/text/proverbs.jsonl");
  j["data"]["queries"] = testing::source_path("fixtures/text/queries.jsonl");
  j["model"]["init"] = kInit;
  j["model"]["d_model"] = 16;
  const std::string path = ::testing::TempDir() + "/mismatched-init.json";
  std::ofstream(path) << j.dump(2);
  const auto o = testing::run_command(std::string(MAGIC_RUN_BINARY) + " --config " + path);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("gpt_init_python.safetensors: tensor '"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("has shape [257, 8], expected [257, 16]"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("training:"), std::string::npos) << o.output;
}

}  // namespace
}  // namespace magic
