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
// The sides run interleaved, round by round (peer, peer with the malloc setting, magic-run; then
// again), so that a machine's drift lands on all of them; each side's figure is its fastest
// round's (train + REPLAY), its memory the largest peak over its rounds. Each row names the BLAS
// library each side mapped and the threads each runs (the peer's as it prints them, magic-run's as
// OMP_NUM_THREADS sets them); where they differ no speed-up is printed.
//
//   peer_compare --peer PATH [--steps 16,64,256] [--threads 1,2] [--rounds 3] [--python /usr/bin/python3]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "bench/child_run.h"
#include "bench/side_rounds.h"
#include "lib/core/strings.h"

namespace {

using magic::format_fixed;
using magic::split;
using magic::str_cat;
using magic::bench::blas_text;
using magic::bench::ChildRun;
using magic::bench::field;
using magic::bench::run_child;
using magic::bench::Side;

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
  const std::string usage = "peer_compare --peer PATH [--steps 16,64,256] [--threads 1,2] [--rounds 3] [--python PATH]";
  auto flags = magic::bench::parse_flags(
      argc, argv,
      {{"steps", "16,64,256"}, {"threads", "1,2"}, {"rounds", "3"}, {"python", "/usr/bin/python3"}, {"peer", ""}},
      usage);
  const std::string steps_list = flags["steps"], threads_list = flags["threads"], python = flags["python"],
                    peer = flags["peer"];
  const int64_t rounds = std::atoll(flags["rounds"].c_str());
  if (rounds < 1) {
    std::cerr << "peer_compare: --rounds " << flags["rounds"] << ": expected a count of 1 or more\nusage: " << usage
              << "\n";
    return 2;
  }
  if (peer.empty()) {
    std::cerr << "peer_compare: --peer PATH is required: the path of a PyTorch MAGIC peer script (such as "
              << "peer_magic.py: MAGIC in PyTorch with autograd double backward), run with --python; "
              << "it is not part of this repository\n"
              << "usage: " << usage << "\n";
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
  // Its configs and documents go when it ends, however it ends.
  const std::unique_ptr<const std::string, void (*)(const std::string*)> remove_dir(
      &dir, [](const std::string* d) { std::filesystem::remove_all(*d); });
  std::cout << "peer_compare: GPT 2 layers, d=64, 4 heads, T=128, batch 8, AdamW, sqrt checkpoints, fp64; "
            << "seconds as each side reports them, the fastest of " << rounds
            << " interleaved rounds, the largest peak RSS of each process\n\n"
            << "| N | threads | peer train s | peer REPLAY s | peer RSS MiB | magic-run train s | magic-run REPLAY s "
               "| magic-run RSS MiB | end-to-end speed-up | peer with our malloc setting: train + REPLAY s | "
               "speed-up over it |\n"
            << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  std::vector<std::string> notes;
  for (const std::string& threads : split(threads_list, ',')) {
    for (const std::string& steps : split(steps_list, ',')) {
      const std::string config = write_run(dir, std::stoll(steps));
      const std::vector<std::string> peer_argv{python, peer,  "--layers", "2", "--d",     "64",  "--heads",   "4",
                                               "--T",  "128", "--batch",  "8", "--steps", steps, "--threads", threads};
      const std::vector<std::pair<std::string, std::string>> blas_threads = {{"OMP_NUM_THREADS", threads},
                                                                             {"OPENBLAS_NUM_THREADS", threads}};
      auto with = [&](std::vector<std::pair<std::string, std::string>> env) {
        env.insert(env.end(), blas_threads.begin(), blas_threads.end());
        return env;
      };
      Side p, q, m;
      for (int64_t round = 0; round < rounds; ++round) {
        const ChildRun pr = run_child(peer_argv, with({}));
        const ChildRun qr = run_child(
            peer_argv,
            with({{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295"}}));
        const ChildRun mr = run_child({MAGIC_RUN_BINARY, "--config", config, "--top", "0"}, with({}));
        if (pr.exit_code != 0 || qr.exit_code != 0 || mr.exit_code != 0) {
          std::cerr << "peer_compare: a run failed (peer exit " << pr.exit_code << ", magic-run exit " << mr.exit_code
                    << ")\n"
                    << pr.output << mr.output;
          return 1;
        }
        const auto peer_threads = [](const ChildRun& r) {
          return str_cat(static_cast<int64_t>(field(r.output, "threads=([0-9]+)", "peer threads")));
        };
        p.add(field(pr.output, "train_s=([0-9.]+)", "peer train_s"),
              field(pr.output, "replay_s=([0-9.]+)", "peer replay_s"), pr, peer_threads(pr));
        q.add(field(qr.output, "train_s=([0-9.]+)", "peer train_s"),
              field(qr.output, "replay_s=([0-9.]+)", "peer replay_s"), qr, peer_threads(qr));
        // magic-run's intra-op threads are libtorch's, which OMP_NUM_THREADS sets at its start.
        m.add(field(mr.output, "training ([0-9.]+) s", "magic-run training time"),
              field(mr.output, "REPLAY ([0-9.]+) s;", "magic-run REPLAY time"), mr, threads);
      }
      // A speed-up between two BLAS libraries, or two thread counts, measures those.
      const bool alike = magic::bench::alike(p, m) && magic::bench::alike(q, m);
      const auto speed_up = [&](double peer_s) { return alike ? format_fixed(peer_s / m.total(), 2) + "x" : "-"; };
      std::cout << "| " << steps << " | " << threads << " | " << format_fixed(p.train_s, 2) << " | "
                << format_fixed(p.replay_s, 2) << " | " << format_fixed(p.peak_rss_mib, 0) << " | "
                << format_fixed(m.train_s, 2) << " | " << format_fixed(m.replay_s, 2) << " | "
                << format_fixed(m.peak_rss_mib, 0) << " | " << speed_up(p.total()) << " | "
                << format_fixed(q.total(), 2) << " | " << speed_up(q.total()) << " |" << std::endl;
      notes.push_back(str_cat("N = ", steps, ", --threads ", threads, ": peer ", p.threads, " threads, BLAS ",
                              blas_text(p.blas), "; magic-run ", m.threads, " threads, BLAS ", blas_text(m.blas),
                              alike ? "" : " (they differ: no speed-up printed)"));
    }
  }
  std::cout << "\n";
  for (const auto& note : notes) std::cout << note << "\n";
  return 0;
}
