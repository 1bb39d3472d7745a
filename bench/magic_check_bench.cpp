// magic_check_bench: wall time of whole magic-check runs, as a user launches them (Gloo on
// loopback; --launch spawn: every rank a process, --launch threads: every rank a thread of one
// process). Prints, per layout and launch, the fastest and median of R runs of the plain check
// and of R runs of --bite.
//
//   magic_check_bench [--repeats R] [--topologies "n_ci=4,n_per_block=2;dp=4;dp=2,cp=2,fsdp=2"]
//                     [--launches spawn,threads]
#include <sys/wait.h>
#include <thread>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/topology.h"

namespace {

double timed_run(const std::string& args, int& exit_code) {
  const std::string command = std::string(MAGIC_CHECK_BINARY) + " " + args + " > /dev/null 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = magic::bench::parse_flags(
      argc, argv,
      {{"repeats", "3"}, {"topologies", "n_ci=4,n_per_block=2;dp=4;dp=2,cp=2,fsdp=2"}, {"launches", "spawn,threads"}},
      "magic_check_bench [--repeats R] [--topologies \"T1;T2\"] [--launches spawn,threads]");
  const int repeats = std::stoi(flags["repeats"]);
  const std::string topologies = flags["topologies"], launches = flags["launches"];
  std::cout << "magic_check_bench: " << std::thread::hardware_concurrency() << " cores, " << repeats
            << " runs per layout, fp64, Gloo on loopback\n\n"
            << "| topology | ranks | launch | check min s | check median s | exit | --bite min s | --bite median s | "
               "exit |\n"
            << "|---|---:|---|---:|---:|---:|---:|---:|---:|\n";
  for (const std::string& topology : magic::split(topologies, ';')) {
    for (const std::string& launch : magic::split(launches, ',')) {
      const std::string args = "--launch " + launch + " --topology " + topology;
      std::vector<double> times, bites;
      int code = 0, bite_code = 0;
      for (int r = 0; r < repeats; ++r) times.push_back(timed_run(args, code));
      for (int r = 0; r < repeats; ++r) bites.push_back(timed_run(args + " --bite", bite_code));
      std::sort(times.begin(), times.end());
      std::sort(bites.begin(), bites.end());
      const int64_t ranks = magic::dist::TopologySpec::parse(topology).world_size();
      std::cout << "| " << topology << " | " << ranks << " | " << launch << " | "
                << magic::format_fixed(times.front(), 2) << " | " << magic::format_fixed(times[times.size() / 2], 2)
                << " | " << code << " | " << magic::format_fixed(bites.front(), 2) << " | "
                << magic::format_fixed(bites[bites.size() / 2], 2) << " | " << bite_code << " |" << std::endl;
    }
  }
  return 0;
}
