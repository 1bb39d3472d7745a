// magic_check_bench: wall time and peak memory of whole magic-check runs, as a user launches them
// (Gloo on loopback; --launch spawn: every rank a process, --launch threads: every rank a thread of
// one process). Prints, per layout and launch, the fastest and median of R runs of the plain check
// and the most memory its process tree held at once (Σ RSS of the launcher and its ranks, sampled
// every 20 ms: bench/process_tree.h), and with --bite 1 the same for R runs of --bite.
//
//   magic_check_bench [--repeats R] [--topologies "n_ci=4,n_per_block=2;dp=4;dp=2,cp=2,fsdp=2"]
//                     [--launches spawn,threads] [--bite 1] [--args "--batch 64"]
// --args: more magic-check flags for every run (a batch every layout splits: the default batch
// grows with dp, past the workload's 69 examples at dp=32).
#include <thread>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/process_tree.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/topology.h"

namespace {

struct Runs {
  std::vector<double> seconds;
  int64_t peak_bytes = 0;
  int exit_code = 0;
};

Runs repeated(const std::string& args, int repeats) {
  Runs runs;
  for (int r = 0; r < repeats; ++r) {
    const magic::bench::TreeRun run = magic::bench::run_sampling_tree(std::string(MAGIC_CHECK_BINARY) + " " + args);
    runs.seconds.push_back(run.wall_s);
    runs.peak_bytes = std::max(runs.peak_bytes, run.peak_tree_bytes);
    runs.exit_code = run.exit_code;
  }
  std::sort(runs.seconds.begin(), runs.seconds.end());
  return runs;
}

std::string cells(const Runs& runs) {
  return magic::str_cat(magic::format_fixed(runs.seconds.front(), 2), " | ",
                        magic::format_fixed(runs.seconds[runs.seconds.size() / 2], 2), " | ",
                        magic::format_fixed(static_cast<double>(runs.peak_bytes) / 1048576.0, 0), " | ",
                        runs.exit_code);
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = magic::bench::parse_flags(argc, argv,
                                         {{"repeats", "3"},
                                          {"topologies", "n_ci=4,n_per_block=2;dp=4;dp=2,cp=2,fsdp=2"},
                                          {"launches", "spawn,threads"},
                                          {"bite", "1"},
                                          {"args", ""}},
                                         "magic_check_bench [--repeats R] [--topologies \"T1;T2\"] [--launches "
                                         "spawn,threads] [--bite 1] [--args FLAGS]");
  const int repeats = std::stoi(flags["repeats"]);
  const bool bite = flags["bite"] != "0";
  const std::string topologies = flags["topologies"], launches = flags["launches"];
  std::cout << "magic_check_bench: " << std::thread::hardware_concurrency() << " cores, " << repeats
            << " runs per layout, fp64, Gloo on loopback" << (flags["args"].empty() ? "" : ", " + flags["args"])
            << "\n\n"
            << "| topology | ranks | launch | check min s | check median s | peak MiB | exit |"
            << (bite ? " --bite min s | --bite median s | peak MiB | exit |" : "") << "\n"
            << "|---|---:|---|---:|---:|---:|---:|" << (bite ? "---:|---:|---:|---:|" : "") << "\n";
  for (const std::string& topology : magic::split(topologies, ';')) {
    for (const std::string& launch : magic::split(launches, ',')) {
      const std::string args = "--launch " + launch + " --topology " + topology + " " + flags["args"];
      const Runs check = repeated(args, repeats);
      const int64_t ranks = magic::dist::TopologySpec::parse(topology).world_size();
      std::cout << "| " << topology << " | " << ranks << " | " << launch << " | " << cells(check) << " |";
      if (bite) std::cout << " " << cells(repeated(args + " --bite", repeats)) << " |";
      std::cout << std::endl;
    }
  }
  return 0;
}
