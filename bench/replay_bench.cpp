// replay_bench: forward training vs REPLAY time and memory as the run grows.
//
// The run is bench/replay_bench_config.h's: N steps with the given checkpoint schedule, with each
// given count of intra-op threads (two or more: REPLAY pipelined, as magic-run runs it;
// replay_mode.h). Each (N, schedule, threads) runs in its own child process so
// that its peak RSS (VmHWM) is its own; "growth" is peak RSS minus the RSS before training started.
// A schedule `budget:F` is a checkpoint budget of F times the states sqrt holds at its peak at that
// N (F = 1, 0.5, 0.25: "checkpoints": {"budget": ...} of that many states' bytes); a budget runs
// REPLAY sequentially. Each row ends with the steps REPLAY recomputed (sqrt's: N − C).
//
//   replay_bench [--steps 16,64,256] [--schedules sqrt,all,budget:0.5] [--threads 1]
#include <ATen/Parallel.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/bench_flags.h"
#include "bench/child_run.h"
#include "bench/replay_bench_config.h"
#include "lib/core/allocator.h"
#include "lib/core/caching_cpu_allocator.h"
#include "lib/core/strings.h"
#include "lib/train/magic_pipeline.h"
#include "lib/train/memory_estimate.h"

namespace {

using namespace magic;

// One measurement, printed as a tab-separated line for the parent.
int measure(int64_t steps, const std::string& schedule, int threads) {
  at::set_num_threads(threads);
  const bool budget = schedule.rfind("budget:", 0) == 0;
  RunConfig run =
      bench::replay_bench_config(steps, budget ? "sqrt" : schedule, std::string(MAGIC_SOURCE_DIR) + "/fixtures");
  if (budget) {
    const double fraction = std::stod(schedule.substr(7));
    const auto sqrt_states = static_cast<double>(peak_states_held(CheckpointSchedule::kSqrt, steps, false));
    run.checkpoints = CheckpointSchedule::kBudget;
    run.checkpoint_budget = static_cast<int64_t>(std::floor(fraction * sqrt_states)) * estimate_state_bytes(run) + 1;
  }
  const CheckpointPlan plan = run_checkpoint_plan(run);
  const LmProblem problem = build_lm_problem(run);
  const int64_t baseline = bench::status_kib("VmRSS");
  MagicOptions options;
  options.schedule = run.checkpoints;
  options.budget_states = budget ? plan.states : 0;
  options.replay_mode =
      budget ? ReplayMode::kSequential : choose_replay_mode(problem.step->runs_collectives(), threads);
  MagicResult r = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  const int64_t peak = bench::status_kib("VmHWM");
  std::cout << steps << '\t' << schedule << '\t' << r.train_seconds << '\t' << r.replay_seconds << '\t' << r.checkpoints
            << '\t' << r.peak_states_held << '\t' << r.checkpoint_bytes << '\t' << peak << '\t' << peak - baseline
            << '\t' << plan.recomputations << std::endl;
  return 0;
}

std::string run_child(const std::string& self, int64_t steps, const std::string& schedule, const std::string& threads) {
  const std::string command = self + " --measure " + std::to_string(steps) + " " + schedule + " " + threads;
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  pclose(pipe);
  return output;
}

}  // namespace

int main(int argc, char** argv) {
  magic::keep_freed_memory_in_process();   // lib/core/allocator.h
  magic::install_caching_cpu_allocator();  // lib/core/caching_cpu_allocator.h
  // --measure N SCHEDULE THREADS: one configuration, in this (child) process.
  if (argc == 5 && std::string(argv[1]) == "--measure") try {
      return measure(std::stoll(argv[2]), argv[3], std::stoi(argv[4]));
    } catch (const std::exception& e) {  // one line naming the row, not an abort's
      std::cerr << "replay_bench: N = " << argv[2] << ", schedule " << argv[3] << ": " << e.what() << "\n";
      return 2;
    }
  auto flags =
      magic::bench::parse_flags(argc, argv, {{"steps", "16,64,256"}, {"schedules", "sqrt,all"}, {"threads", "1"}},
                                "replay_bench [--steps 16,64,256] [--schedules sqrt,all] [--threads 1,2]");
  const std::string steps_arg = flags["steps"], schedules_arg = flags["schedules"], threads_arg = flags["threads"];
  std::cout << "replay_bench: GPT 2 layers, d=64, 4 heads, T=128, batch 8, AdamW, fp64\n\n";
  std::cout << "| N | schedule | threads | train s | REPLAY s | REPLAY/train | checkpoints | states held | checkpoint "
               "MiB | peak RSS MiB | RSS growth MiB | recomputed |\n";
  std::cout << "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& threads : split(threads_arg, ',')) {
    for (const auto& schedule : split(schedules_arg, ',')) {
      for (const auto& n : split(steps_arg, ',')) {
        std::stringstream line(run_child(argv[0], std::stoll(n), schedule, threads));
        int64_t steps = 0, checkpoints = 0, held = 0, bytes = 0, peak = 0, growth = 0, recomputed = 0;
        double train = 0, replay = 0;
        std::string sched;
        if (!(line >> steps >> sched >> train >> replay >> checkpoints >> held >> bytes >> peak >> growth >>
              recomputed)) {
          std::cout << "| " << n << " | " << schedule << " | " << threads
                    << " | (child failed: its message is above) |\n";
          continue;
        }
        std::cout << "| " << steps << " | " << sched << " | " << threads << " | " << format_fixed(train, 2) << " | "
                  << format_fixed(replay, 2) << " | " << format_fixed(replay / train, 2) << " | " << checkpoints
                  << " | " << held << " | " << format_fixed(bytes / 1048576.0, 1) << " | "
                  << format_fixed(peak / 1024.0, 0) << " | " << format_fixed(growth / 1024.0, 0) << " | " << recomputed
                  << " |" << std::endl;
      }
    }
  }
  return 0;
}
