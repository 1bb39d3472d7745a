// per_query_bench: per-query REPLAY in one pass against one REPLAY per query.
//
// The run is a config's (the demo's, fixtures/runs/demo.json, by default) with Q queries: the
// demo's eight, then Proverbs verses, written to a scratch folder that is removed afterwards.
//
// Time, in one process: the run is trained once (its checkpoints kept), then each round takes
// the Q queries' REPLAYs one after another (--separate 1) and in one pass with each --batches
// count of products in one backward pass, interleaved round by round; each figure is its fastest
// round's. The one-pass scores are compared with the separate ones: the largest |difference| over
// the largest |score|, over all queries.
// Memory (--memory 1): a plain run (one REPLAY of the query set) and each one-pass run, each the
// whole pipeline in its own child process: peak RSS (wait4), beside magic-run's estimate
// (memory_estimate.h) and what the Q queries' cotangents take (λ, ∂Q/∂θ_N and the scores).
//
//   per_query_bench [--config fixtures/runs/demo.json] [--queries 8] [--batches 1,8] [--separate 1]
//                   [--rounds 3] [--threads 1] [--memory 1]
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "bench/bench_flags.h"
#include "bench/child_run.h"
#include "lib/core/allocator.h"
#include "lib/core/caching_cpu_allocator.h"
#include "lib/core/config_file.h"
#include "lib/core/scratch_folder.h"
#include "lib/core/strings.h"
#include "lib/train/magic_pipeline.h"
#include "lib/train/memory_estimate.h"
#include "lib/train/run_config.h"

namespace {

using namespace magic;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<int64_t> counts(const std::string& list, const std::string& flag) {
  std::vector<int64_t> out;
  for (const auto& item : split(list, ',')) {
    int64_t n = 0;
    try {
      n = std::stoll(item);
    } catch (const std::exception&) {
    }
    if (n < 1) {
      std::cerr << "per_query_bench: --" << flag << " expects counts >= 1, got " << list << "\n";
      std::exit(2);
    }
    out.push_back(n);
  }
  return out;
}

// The config at `path` with Q queries, written into `folder`: the demo's queries, then Proverbs verses.
std::string config_with_queries(const std::string& path, int64_t queries, const std::string& folder) {
  const std::string fixtures = std::string(MAGIC_SOURCE_DIR) + "/fixtures/text/";
  std::ofstream out(folder + "/queries.jsonl");
  int64_t written = 0;
  for (const std::string file : {"queries.jsonl", "proverbs.jsonl"}) {
    std::ifstream in(fixtures + file);
    for (std::string line; written < queries && std::getline(in, line); ++written) out << line << "\n";
  }
  if (written < queries) {
    std::cerr << "per_query_bench: --queries " << queries << ": at most " << written << " are available\n";
    std::exit(2);
  }
  nlohmann::json config = read_config_file(path);
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  config["data"]["train"] = std::filesystem::absolute(base / config["data"]["train"].get<std::string>()).string();
  config["data"]["queries"] = folder + "/queries.jsonl";
  const std::string written_path = folder + "/config.json";
  std::ofstream(written_path) << config.dump(2);
  return written_path;
}

// Child: the whole pipeline, plain (batch 0) or per query in one pass; prints its peak RSS.
int measure_memory(const std::string& config_path, int64_t batch) {
  at::set_num_threads(1);
  const RunConfig config = RunConfig::load(config_path);
  const LmProblem problem = build_lm_problem(config);
  MagicOptions options;
  options.schedule = config.checkpoints;
  if (config.checkpoints == CheckpointSchedule::kBudget) options.budget_states = run_checkpoint_plan(config).states;
  options.per_query = batch > 0;
  options.query_batch = std::max<int64_t>(batch, 1);
  run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  std::cout << "peak_kib " << bench::status_kib("VmHWM") << std::endl;
  return 0;
}

double child_peak_mib(const std::string& self, const std::string& config, int64_t batch) {
  const bench::ChildRun r = bench::run_child({self, "--measure-memory", config, std::to_string(batch)}, {});
  const size_t at = r.output.find("peak_kib ");
  if (r.exit_code != 0 || at == std::string::npos) {
    std::cerr << "per_query_bench: the memory child failed:\n" << r.output;
    std::exit(1);
  }
  return std::stod(r.output.substr(at + 9)) / 1024.0;
}

double tree_bytes(const TensorTree& tree) {
  double bytes = 0;
  for (const auto& e : tree) bytes += static_cast<double>(e.tensor.numel() * e.tensor.element_size());
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory_in_process();   // as magic-run: lib/core/allocator.h
  install_caching_cpu_allocator();  // lib/core/caching_cpu_allocator.h
  if (argc == 4 && std::string(argv[1]) == "--measure-memory") return measure_memory(argv[2], std::stoll(argv[3]));
  auto flags = bench::parse_flags(argc, argv,
                                  {{"config", std::string(MAGIC_SOURCE_DIR) + "/fixtures/runs/demo.json"},
                                   {"queries", "8"},
                                   {"batches", "1,8"},
                                   {"separate", "1"},
                                   {"rounds", "3"},
                                   {"threads", "1"},
                                   {"memory", "1"}},
                                  "per_query_bench [--config PATH] [--queries 8] [--batches 1,8] [--separate 1] "
                                  "[--rounds 3] [--threads 1] [--memory 1]");
  const int64_t queries = counts(flags["queries"], "queries").front();
  const std::vector<int64_t> batches = counts(flags["batches"], "batches");
  const int64_t rounds = counts(flags["rounds"], "rounds").front();
  const int threads = static_cast<int>(counts(flags["threads"], "threads").front());
  const bool separate = flags["separate"] != "0", memory = flags["memory"] != "0";
  ScratchFolder scratch("per-query-bench");
  if (scratch.path().empty()) {
    std::cerr << "per_query_bench: " << scratch.error() << "\n";
    return 1;
  }
  const std::string config_path = config_with_queries(flags["config"], queries, scratch.path());
  const RunConfig config = RunConfig::load(config_path);
  at::set_num_threads(threads);
  const LmProblem p = build_lm_problem(config);
  const StepFunction& step = *p.step;
  const CheckpointPlan plan = run_checkpoint_plan(config);
  CheckpointStore store(plan.steps);
  store.set_segment_slots(plan.segment_slots);
  const TrainState final_state = train_forward(step, p.initial, p.weights, &store, {});
  std::vector<TensorTree> dq;
  for (int64_t j = 0; j < queries; ++j) dq.push_back(p.query->gradient(final_state.params, j));
  const ReplayBackward replay(step, store, p.weights);

  std::cout << "per_query_bench: " << flags["config"] << ", " << queries << " queries, " << step.num_steps()
            << " steps, " << plan_summary(config.checkpoints, plan, config.checkpoint_budget) << ", " << threads
            << " thread(s); fastest of " << rounds << " interleaved rounds\n\n";
  const double inf = std::numeric_limits<double>::infinity();
  double separate_s = inf;
  std::vector<double> one_pass_s(batches.size(), inf);
  std::vector<at::Tensor> alone(queries);
  std::vector<std::vector<at::Tensor>> together(batches.size());
  for (int64_t round = 0; round < rounds; ++round) {
    if (separate) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t j = 0; j < queries; ++j) alone[j] = replay.run(dq[j]).dw;
      separate_s = std::min(separate_s, seconds_since(start));
    }
    for (size_t b = 0; b < batches.size(); ++b) {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<ReplayResult> r = replay.run_each(dq, QueryProducts{static_cast<size_t>(batches[b])});
      one_pass_s[b] = std::min(one_pass_s[b], seconds_since(start));
      together[b].clear();
      for (const auto& x : r) together[b].push_back(x.dw);
    }
  }
  std::cout << "| REPLAY | products in one backward pass | s | / separate | max |difference| / max |score| |\n"
               "|---|---:|---:|---:|---:|\n";
  if (separate) std::cout << "| " << queries << " separate | 1 | " << format_fixed(separate_s, 2) << " | 1 | 0 |\n";
  for (size_t b = 0; b < batches.size(); ++b) {
    std::string ratio = "-", gap = "-";
    if (separate) {
      double largest = 0, worst = 0;
      for (int64_t j = 0; j < queries; ++j) {
        largest = std::max(largest, alone[j].abs().max().item<double>());
        worst = std::max(worst, (together[b][j] - alone[j]).abs().max().item<double>());
      }
      ratio = format_fixed(one_pass_s[b] / separate_s, 3);
      gap = str_cat(worst / largest);
    }
    std::cout << "| one pass | " << batches[b] << " | " << format_fixed(one_pass_s[b], 2) << " | " << ratio << " | "
              << gap << " |\n";
  }
  if (!memory) return 0;
  double cotangents = 0;
  for (int64_t j = 0; j < queries; ++j) {
    cotangents += tree_bytes(flatten_state(final_state)) + tree_bytes(dq[j]) +
                  static_cast<double>(p.weights.numel() * p.weights.element_size());
  }
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  const double plain = child_peak_mib(self, config_path, 0);
  std::cout << "\n| run | peak RSS MiB | estimate MiB |\n|---|---:|---:|\n";
  // The RSS holds LibTorch itself (about 160 MiB), which the estimate leaves out.
  std::cout << "| plain (one REPLAY of the query set) | " << format_fixed(plain, 0) << " | "
            << format_fixed(estimate_run_memory(config).total() / 1048576.0, 0) << " |\n";
  for (const int64_t batch : batches) {
    MemoryEstimate e = estimate_run_memory(config);
    add_per_query_replay(config, queries, batch, p.weights.numel(), e);
    std::cout << "| one pass, " << batch << " at a time | " << format_fixed(child_peak_mib(self, config_path, batch), 0)
              << " | " << format_fixed(e.total() / 1048576.0, 0) << " |\n";
  }
  std::cout << "\nthe " << queries
            << " queries' cotangents (λ, ∂Q/∂θ_N, scores): " << format_fixed(cotangents / 1048576.0, 1)
            << " MiB; plain + cotangents: " << format_fixed(plain + cotangents / 1048576.0, 0) << " MiB\n";
  return 0;
}
