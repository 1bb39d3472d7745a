// peer_compare: magic-run against a PyTorch peer (a script outside this repository, given with
// --peer: MAGIC in PyTorch Python with autograd double backward) on the same run, side by side in
// one program.
//
// The run, on both sides: GPT with 2 layers, d_model 64, 4 heads, 128-token rows, batch 8,
// AdamW (lr 1e-3, weight decay 0.01, eps_root 1e-12, constant learning rate, no clipping), sqrt
// checkpoints, fp64, N steps over N x 8 documents in file order (each seen once), 4 queries.
// The documents are 127 random printable bytes (128 tokens with the end-of-document token: one
// full row each, as the peer's random rows); token values do not change the work.
// Each side runs as its own process (peak RSS is the child's own, from wait4); the peer with
// Debian's /usr/bin/python3 and python3-torch, magic-run as a user runs it (OMP_NUM_THREADS).
// The peer runs twice: as shipped, and with the malloc setting magic-run makes for itself
// (lib/core/allocator.h, given to glibc as GLIBC_TUNABLES), so the speed-up that is not malloc's
// shows in the last column. magic-run's caching CPU allocator (lib/core/caching_cpu_allocator.h)
// is its own and not given to the peer.
//
//   peer_compare --peer PATH [--steps 16,64,256] [--threads 1,2] [--python /usr/bin/python3]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "bench/child_run.h"
#include "lib/core/strings.h"

namespace {

using magic::format_fixed;
using magic::split;
using magic::str_cat;
using magic::bench::ChildRun;
using magic::bench::run_child;

double field(const std::string& text, const std::string& pattern, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) {
    throw std::runtime_error(str_cat("no ", what, " in the output:\n", text));
  }
  return std::stod(m[1]);
}

void write_documents(const std::string& path, int64_t count, std::mt19937_64& rng) {
  std::ofstream out(path);
  std::uniform_int_distribution<int> printable(32, 126);
  for (int64_t i = 0; i < count; ++i) {
    std::string text(127, ' ');
    for (char& c : text) c = static_cast<char>(printable(rng));
    out << nlohmann::json{{"id", str_cat("r", i)}, {"text", text}}.dump() << "\n";
  }
}

std::string write_run(const std::string& dir, int64_t steps) {
  std::mt19937_64 rng(1);
  const std::string train = str_cat(dir, "/train-", steps, ".jsonl"), queries = dir + "/queries.jsonl";
  write_documents(train, steps * 8, rng);
  write_documents(queries, 4, rng);
  const nlohmann::json config = {
      {"seed", 0},
      {"dtype", "fp64"},
      {"model", {{"vocab", 257}, {"d_model", 64}, {"n_layers", 2}, {"n_heads", 4}, {"max_len", 128}}},
      {"data", {{"train", train}, {"queries", queries}}},
      {"training", {{"steps", steps}, {"batch_size", 8}, {"shuffle", false}, {"checkpoints", "sqrt"}}},
      {"optimizer", {{"name", "adamw"}, {"lr", 1e-3}, {"weight_decay", 0.01}, {"eps_root", 1e-12}}},
  };
  const std::string path = str_cat(dir, "/run-", steps, ".json");
  std::ofstream(path) << config.dump(2);
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = magic::bench::parse_flags(
      argc, argv, {{"steps", "16,64,256"}, {"threads", "1,2"}, {"python", "/usr/bin/python3"}, {"peer", ""}},
      "peer_compare --peer PATH [--steps 16,64,256] [--threads 1,2] [--python PATH]");
  const std::string steps_list = flags["steps"], threads_list = flags["threads"], python = flags["python"],
                    peer = flags["peer"];
  if (peer.empty()) {
    std::cerr << "peer_compare: --peer PATH is required: the path of a PyTorch MAGIC peer script (such as "
              << "peer_magic.py: MAGIC in PyTorch with autograd double backward), run with --python; "
              << "it is not part of this repository\n"
              << "usage: peer_compare --peer PATH [--steps 16,64,256] [--threads 1,2] [--python PATH]\n";
    return 2;
  }
  if (!std::filesystem::exists(peer)) {
    std::cerr << "peer_compare: the peer " << peer << " is not there (--peer PATH)\n";
    return 2;
  }
  if (run_child({python, "-c", "import torch"}, {}).exit_code != 0) {
    std::cerr << "peer_compare: " << python << " cannot import torch: the peer needs Debian's python3-torch "
              << "(apt-get install python3-torch); this program installs nothing\n";
    return 2;
  }
  const std::string dir = std::filesystem::temp_directory_path() / "magic-peer-compare";
  std::filesystem::create_directories(dir);
  std::cout << "peer_compare: GPT 2 layers, d=64, 4 heads, T=128, batch 8, AdamW, sqrt checkpoints, fp64; "
            << "seconds as each side reports them, peak RSS of each process\n\n"
            << "| N | threads | peer train s | peer REPLAY s | peer RSS MiB | magic-run train s | magic-run REPLAY s "
               "| magic-run RSS MiB | end-to-end speed-up | peer with our malloc setting: train + REPLAY s | "
               "speed-up over it |\n"
            << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const std::string& threads : split(threads_list, ',')) {
    for (const std::string& steps : split(steps_list, ',')) {
      const std::string config = write_run(dir, std::stoll(steps));
      const std::vector<std::string> peer_argv{python, peer,  "--layers", "2", "--d",     "64",  "--heads",   "4",
                                               "--T",  "128", "--batch",  "8", "--steps", steps, "--threads", threads};
      const ChildRun p = run_child(peer_argv, {});
      const ChildRun q = run_child(
          peer_argv,
          {{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295"}});
      const ChildRun m =
          run_child({MAGIC_RUN_BINARY, "--config", config, "--top", "0"}, {{"OMP_NUM_THREADS", threads}});
      if (p.exit_code != 0 || q.exit_code != 0 || m.exit_code != 0) {
        std::cerr << "peer_compare: a run failed (peer exit " << p.exit_code << ", magic-run exit " << m.exit_code
                  << ")\n"
                  << p.output << m.output;
        return 1;
      }
      const double pt = field(p.output, "train_s=([0-9.]+)", "peer train_s");
      const double pr = field(p.output, "replay_s=([0-9.]+)", "peer replay_s");
      const double qt =
          field(q.output, "train_s=([0-9.]+)", "peer train_s") + field(q.output, "replay_s=([0-9.]+)", "peer replay_s");
      const double mt = field(m.output, "training ([0-9.]+) s", "magic-run training time");
      const double mr = field(m.output, "REPLAY ([0-9.]+) s;", "magic-run REPLAY time");
      std::cout << "| " << steps << " | " << threads << " | " << format_fixed(pt, 2) << " | " << format_fixed(pr, 2)
                << " | " << format_fixed(p.peak_rss_mib, 0) << " | " << format_fixed(mt, 2) << " | "
                << format_fixed(mr, 2) << " | " << format_fixed(m.peak_rss_mib, 0) << " | "
                << format_fixed((pt + pr) / (mt + mr), 2) << "x | " << format_fixed(qt, 2) << " | "
                << format_fixed(qt / (mt + mr), 2) << "x |" << std::endl;
    }
  }
  return 0;
}
