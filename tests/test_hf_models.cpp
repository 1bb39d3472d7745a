// GPT-2 and GPT-NeoX model folders against an independent PyTorch implementation of each
// (fixtures/golden/make_hf_golden.py, written from the published definitions): logits, loss and
// the gradient with respect to every tensor of the folder, in the folder's own names and layouts
// (so the name mapping, the transposes and the per-head regrouping are checked with the forward),
// at 1e-12 in fp64. Planted errors prove the comparison sees each feature; bad folders are refused
// by name.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/io/safetensors.h"
#include "lib/model/hf_model_folder.h"
#include "lib/model/lm_loss.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
constexpr double kTolerance = 1e-12;

std::string folder_of(const std::string& key) {
  return testing::source_path("fixtures/models/" + key + "-tiny");
}

const SafetensorsFile& golden() {
  static const SafetensorsFile g = load_safetensors(testing::source_path("fixtures/golden/hf_golden.safetensors"));
  return g;
}

struct Outcome {
  double logits = 0, loss = 0, grad = 0;  // worst relative errors against the golden values
  size_t grads = 0;
};

double relative(const at::Tensor& ours, const at::Tensor& expected) {
  return (ours.detach() - expected).abs().max().item<double>() / expected.abs().max().item<double>();
}

// Our forward on the folder's tensors as leaves; `plant` edits the architecture first.
Outcome compare_with_golden(const std::string& key, const std::function<void(GptConfig&)>& plant = {}) {
  const std::string folder = folder_of(key);
  ModelFolder model = read_model_config(folder);
  if (plant) plant(model.config);
  const TensorTree theirs = load_safetensors(folder + "/model.safetensors").tensors.requires_grad();
  const TensorTree params = map_model_weights(model, theirs, at::kDouble, folder);
  const auto& g = golden().tensors;
  const at::Tensor& labels = g.at(key + ".labels");
  const at::Tensor logits = gpt_forward(model.config, params, g.at(key + ".input_ids"));
  const at::Tensor mask = label_mask(labels, logits.scalar_type());
  const at::Tensor loss =
      reduce_weighted_loss(next_token_losses(logits, labels), mask, at::ones({labels.size(0)}, at::kDouble),
                           Reduction::kMean, mask.sum().item<double>());
  Outcome o;
  o.logits = relative(logits, g.at(key + ".logits"));
  o.loss = relative(loss, g.at(key + ".loss"));
  const TensorTree expected = g.strip_prefix(key + ".grad.");
  std::vector<at::Tensor> leaves;
  for (const auto& e : expected) leaves.push_back(theirs.at(e.name));
  const auto grads = torch::autograd::grad({loss}, leaves);
  for (size_t i = 0; i < grads.size(); ++i) {
    o.grad = std::max(o.grad, relative(grads[i], expected.tensors()[i]));
  }
  o.grads = grads.size();
  return o;
}

TEST(HfModels, LogitsAndGradientsEqualTheIndependentImplementation) {
  for (const std::string key : {"gpt2", "neox"}) {
    const Outcome o = compare_with_golden(key);
    std::printf("  %s: logits %.2e, loss %.2e, gradients of %zu tensors %.2e (relative, fp64)\n", key.c_str(), o.logits,
                o.loss, o.grads, o.grad);
    EXPECT_LE(o.logits, kTolerance) << key;
    EXPECT_LE(o.loss, kTolerance) << key;
    EXPECT_EQ(o.grads, 28u) << key;
    EXPECT_LE(o.grad, kTolerance) << key;
  }
}

// Each architectural feature, planted wrong, moves the logits far past the tolerance.
TEST(HfModels, EachFeaturePlantedWrongIsSeen) {
  const std::vector<std::pair<std::string, std::function<void(GptConfig&)>>> plants = {
      {"gpt2", [](GptConfig& c) { c.activation = Activation::kGeluErf; }},
      {"gpt2", [](GptConfig& c) { c.layer_norm_eps = 1e-3; }},
      {"neox", [](GptConfig& c) { c.parallel_residual = false; }},
      {"neox", [](GptConfig& c) { c.rotary_dims = 8; }},
      {"neox", [](GptConfig& c) { c.rotary_base = 100.0; }},
  };
  for (size_t i = 0; i < plants.size(); ++i) {
    const Outcome o = compare_with_golden(plants[i].first, plants[i].second);
    EXPECT_GT(o.logits, 1e-6) << "plant " << i << " on " << plants[i].first;
  }
}

TEST(HfModels, TheFoldersReadAsTheirArchitectures) {
  const ModelFolder gpt2 = load_model_folder(folder_of("gpt2"), at::kFloat);
  EXPECT_EQ(gpt2.model_type, "gpt2");
  EXPECT_TRUE(gpt2.config.tied_head);
  EXPECT_EQ(gpt2.config.activation, Activation::kGeluTanh);
  EXPECT_FALSE(gpt2.params.contains("head.weight"));
  EXPECT_EQ(gpt2.params.at("blocks.1.mlp.fc.weight").sizes(), (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(gpt2.params.at("tok_emb").scalar_type(), at::kFloat);
  const ModelFolder neox = load_model_folder(folder_of("neox"), at::kDouble);
  EXPECT_EQ(neox.config.positions, Positions::kRotary);
  EXPECT_EQ(neox.config.rotary_dims, 4);  // int(16 * 0.25)
  EXPECT_TRUE(neox.config.parallel_residual);
  EXPECT_FALSE(neox.params.contains("pos_emb"));
  EXPECT_TRUE(neox.params.contains("head.weight"));
  EXPECT_TRUE(gpt_init(neox.config, at::kDouble, 0).same_structure(neox.params))
      << "the folder's parameters are the ones gpt_init makes for its config";
}

// A run's sequences may be shorter than the model's positions: the learned table keeps the rows
// they read, and the logits are the same; longer ones are refused.
TEST(HfModels, AShorterSequenceKeepsTheRowsItReadsAndALongerOneIsRefused) {
  const ModelFolder whole = load_model_folder(folder_of("gpt2"), at::kDouble);
  const ModelFolder cut = load_model_folder(folder_of("gpt2"), at::kDouble, 12);
  EXPECT_EQ(cut.positions, 16);
  EXPECT_EQ(cut.config.max_len, 12);
  EXPECT_TRUE(cut.params.at("pos_emb").equal(whole.params.at("pos_emb").narrow(0, 0, 12)));
  const at::Tensor& ids = golden().tensors.at("gpt2.input_ids");
  EXPECT_TRUE(gpt_forward(cut.config, cut.params, ids).equal(gpt_forward(whole.config, whole.params, ids)));
  const std::string why = testing::input_error_of([] { read_model_config(folder_of("gpt2"), 17); });
  EXPECT_NE(why.find("sequences of 17 tokens are longer than the 16 positions of this model (n_positions)"),
            std::string::npos)
      << why;
}

// REPLAY differentiates the step twice: the Hessian-vector product of the loaded architectures
// against central differences of the gradient, (g(θ + εv) - g(θ - εv)) / 2ε.
TEST(HfModels, HessianVectorProductsMatchDifferencesOfGradients) {
  for (const std::string key : {"gpt2", "neox"}) {
    const ModelFolder m = load_model_folder(folder_of(key), at::kDouble);
    const at::Tensor& ids = golden().tensors.at(key + ".input_ids");
    auto grad_at = [&](const TensorTree& params, bool keep_graph) {
      const at::Tensor logits = gpt_forward(m.config, params, ids);
      const at::Tensor loss = at::log_softmax(logits, -1).select(-1, 3).mean();
      return with_values(params, torch::autograd::grad({loss}, params.tensors(), {}, keep_graph, keep_graph));
    };
    at::Generator gen = make_generator(7);
    const TensorTree v = m.params.map([&](const at::Tensor& t) { return at::randn(t.sizes(), gen, at::kDouble); });
    const TensorTree leaves = m.params.requires_grad();
    const TensorTree g = grad_at(leaves, true);
    const TensorTree hv = with_values(leaves, torch::autograd::grad({dot(g, v)}, leaves.tensors()));
    // Central differences err by O(ε²) (the weights are large enough that attention is far from
    // uniform): a right product's error falls 100-fold from ε = 1e-5 to 1e-6, a wrong one's stays.
    auto error_at = [&](double eps) {
      const TensorTree plus =
          grad_at(zip(m.params, v, [&](auto& p, auto& d) { return p + eps * d; }).requires_grad(), false);
      const TensorTree minus =
          grad_at(zip(m.params, v, [&](auto& p, auto& d) { return p - eps * d; }).requires_grad(), false);
      return relative(hv.flatten(), (plus.flatten() - minus.flatten()) / (2 * eps));
    };
    const double coarse = error_at(1e-5), fine = error_at(1e-6);
    std::printf("  %s: HVP against central differences: %.2e relative at eps 1e-5, %.2e at 1e-6\n", key.c_str(), coarse,
                fine);
    EXPECT_LE(fine, 1e-5) << key;
    EXPECT_GE(coarse / fine, 50.0) << key << ": the difference does not shrink as O(eps^2)";
  }
}

class BadModelFolder : public ::testing::Test {
 public:  // the cases below damage the copy through these
  void SetUp() override {
    dir_ = ::testing::TempDir() + "model_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(folder_of("neox"), dir_, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string refusal() const {
    return testing::input_error_of([&] { load_model_folder(dir_, at::kDouble); });
  }
  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json c = nlohmann::json::parse(testing::read_file(dir_ + "/config.json"));
    edit(c);
    std::ofstream(dir_ + "/config.json") << c.dump();
  }
  void edit_weights(const std::function<void(TensorTree&)>& edit) {
    SafetensorsFile f = load_safetensors(dir_ + "/model.safetensors");
    edit(f.tensors);
    save_safetensors(dir_ + "/model.safetensors", f.tensors);
  }
  std::string dir_;
};

TEST_F(BadModelFolder, EachDefectIsRefusedInOneLineNamingIt) {
  EXPECT_EQ(refusal(), "") << "the copy itself loads";
  struct Case {
    std::string name, expected;
    std::function<void(BadModelFolder&)> damage;
  };
  const std::vector<Case> cases = {
      {"missing config", "config.json: missing", [](BadModelFolder& f) { fs::remove(f.dir_ + "/config.json"); }},
      {"unknown model_type", "config.json: model_type: 'llama' is not supported (expected gpt2 or gpt_neox)",
       [](BadModelFolder& f) { f.edit_config([](nlohmann::json& c) { c["model_type"] = "llama"; }); }},
      {"rope scaling", "config.json: rope_scaling: not supported",
       [](BadModelFolder& f) {
         f.edit_config([](nlohmann::json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; });
       }},
      {"missing size", "config.json: hidden_size: missing",
       [](BadModelFolder& f) { f.edit_config([](nlohmann::json& c) { c.erase("hidden_size"); }); }},
      {"wrong shape", "tensor 'gpt_neox.layers.1.mlp.dense_4h_to_h.weight' has shape [32, 64], expected [32, 128]",
       [](BadModelFolder& f) {
         f.edit_weights([](TensorTree& t) {
           t.set("gpt_neox.layers.1.mlp.dense_4h_to_h.weight", at::zeros({32, 64}, at::kDouble));
         });
       }},
      {"missing tensor", "no tensor 'final_layer_norm.bias'",
       [](BadModelFolder& f) {
         f.edit_weights([](TensorTree& t) {
           t = t.filter([](const std::string& n, const at::Tensor&) { return n != "gpt_neox.final_layer_norm.bias"; });
         });
       }},
      {"unknown tensor", "tensor 'gpt_neox.layers.0.adapter.weight' is not a parameter",
       [](BadModelFolder& f) {
         f.edit_weights([](TensorTree& t) { t.insert("gpt_neox.layers.0.adapter.weight", at::zeros({2})); });
       }},
      {"not finite", "has values that are not finite",
       [](BadModelFolder& f) { f.edit_weights([](TensorTree& t) { t.at("embed_out.weight")[0][0] = std::nan(""); }); }},
      {"truncated safetensors", "model.safetensors: not a valid safetensors file",
       [](BadModelFolder& f) {
         const std::string bytes = testing::read_file(f.dir_ + "/model.safetensors");
         std::ofstream(f.dir_ + "/model.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
       }},
      {"no weights", "no model.safetensors, nor model.safetensors.index.json",
       [](BadModelFolder& f) { fs::remove(f.dir_ + "/model.safetensors"); }},
  };
  for (const auto& c : cases) {
    SetUp();
    c.damage(*this);
    const std::string why = refusal();
    std::printf("  %s: %s\n", c.name.c_str(), why.c_str());
    EXPECT_NE(why.find(c.expected), std::string::npos) << c.name << ": " << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << c.name;
  }
}

}  // namespace
}  // namespace magic
