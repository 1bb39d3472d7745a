// The memory estimate magic-run refuses runs by (memory_estimate.h), against what a run really
// holds: one state is a built problem's state, and the whole estimate bounds the peak resident
// memory a real magic-run process adds to LibTorch's own (measured by the kernel: wait4's
// ru_maxrss, minus that of `magic-run --help`), without exceeding it by more than a third (less
// the pipelined run's next traced graph, whose share of the peak depends on timing).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/train/memory_estimate.h"
#include "tests/support.h"

namespace magic {
namespace {

// Peak resident KiB of a child running MAGIC_RUN_BINARY with `args` and `threads` intra-op
// threads (output discarded).
int64_t peak_rss_kib(const std::vector<std::string>& args, int threads) {
  const std::string threads_text = std::to_string(threads);
  std::cout.flush();  // or the child's freopen writes what the buffer held a second time
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("OMP_NUM_THREADS", threads_text.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(MAGIC_RUN_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (freopen("/dev/null", "w", stdout) == nullptr || freopen("/dev/null", "w", stderr) == nullptr) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "magic-run failed";
  return usage.ru_maxrss;
}

nlohmann::json activation_heavy_run() {
  nlohmann::json j = testing::tiny_run_json({});
  j["data"]["train"] = testing::source_path("fixtures/text/proverbs.jsonl");
  j["data"]["queries"] = testing::source_path("fixtures/text/queries.jsonl");
  j["data"].erase("max_documents");
  j["model"] = {{"vocab", 257}, {"d_model", 16}, {"n_layers", 2}, {"n_heads", 2}, {"max_len", 128}};
  j["training"]["batch_size"] = 32;
  j["training"]["steps"] = 2;
  return j;
}

TEST(MemoryEstimate, OneStateIsABuiltProblemsState) {
  testing::TinyRun r;
  r.optimizer = "adamw";
  const RunConfig config = testing::tiny_run_config(r);
  const LmProblem p = build_lm_problem(config);
  // The estimate counts floating entries only; Adam's step count is one int64.
  EXPECT_EQ(estimate_run_memory(config).state_bytes + 8, state_bytes(p.initial));
}

// With one thread magic-run replays sequentially; with two it pipelines REPLAY (replay_mode.h),
// holding the next step's traced graph and the next segment's states, and its estimate adds them.
TEST(MemoryEstimate, BoundsWhatARealRunAddsToLibTorch) {
#ifdef __SANITIZE_ADDRESS__
  // ASan's allocator (redzones, a quarantine of freed memory, its own size classes) replaces the
  // one whose resident memory this measures, in both directions: 268 MiB above LibTorch against an
  // estimate of 270 with the quarantine off, 174 against the far-above bound's 203 with it on.
  GTEST_SKIP() << "measures the default build's allocator; AddressSanitizer replaces it";
#endif
  const nlohmann::json j = activation_heavy_run();
  const std::string path = ::testing::TempDir() + "/memory-heavy.json";
  std::ofstream(path) << j.dump(2);
  for (int threads : {1, 2}) {
    const ReplayMode mode = choose_replay_mode(false, threads);
    const MemoryEstimate e = estimate_run_memory(RunConfig::load(path), mode);
    const double baseline = static_cast<double>(peak_rss_kib({"--help"}, threads)) * 1024.0;
    const double run = static_cast<double>(peak_rss_kib({"--config", path, "--top", "0"}, threads)) * 1024.0;
    const double added = run - baseline;
    std::cout << threads << " threads: estimate " << e.str() << "; measured " << format_bytes(added)
              << " above LibTorch's " << format_bytes(baseline) << "\n";
    EXPECT_GE(e.total(), added) << threads << " threads: the estimate is below what the run holds";
    // Pipelined, the next step's traced graph counts in full, as if its trace peaked with the
    // product; how much of it a run holds then depends on how the two threads' steps overlap (here
    // 102-117 of 178 MiB on an idle machine, 77 beside another test under ctest -j2), so the far-above
    // bound leaves it out. One thread has no such part: its estimate is bounded whole.
    const double timing_free = e.total() - static_cast<double>(e.traced_bytes);
    EXPECT_LE(timing_free, 1.33 * added) << threads << " threads: the estimate is far above what the run holds";
  }
}

// Per-query REPLAY in one pass adds each query's cotangents, the graph kept between the queries'
// products and a batch's extra temporaries (add_per_query_replay): the estimate still bounds what
// the run adds to LibTorch, and is not far above it, one product at a time, four at once, and one
// at a time with each step traced again (no graph kept).
TEST(MemoryEstimate, BoundsWhatAPerQueryRunAdds) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "measures the default build's allocator; AddressSanitizer replaces it";
#endif
  const std::string path = ::testing::TempDir() + "/memory-per-query.json";
  std::ofstream(path) << activation_heavy_run().dump(2);
  const RunConfig config = RunConfig::load(path);
  const LmProblem p = build_lm_problem(config);
  const double baseline = static_cast<double>(peak_rss_kib({"--help"}, 1)) * 1024.0;
  for (const auto& [batch, retrace] :
       {std::pair{int64_t{1}, false}, std::pair{int64_t{4}, false}, std::pair{int64_t{1}, true}}) {
    MemoryEstimate e = estimate_run_memory(config);
    add_per_query_replay(config, p.query->num_queries(), batch, p.weights.numel(), e, retrace);
    std::vector<std::string> args{"--config",           path, "--top", "0", "--per-query", "--query-batch",
                                  std::to_string(batch)};
    if (retrace) args.push_back("--retrace-per-query");
    const double added = static_cast<double>(peak_rss_kib(args, 1)) * 1024.0 - baseline;
    const std::string run = str_cat("batch ", batch, retrace ? ", traced again" : "");
    std::cout << run << ": estimate " << e.str() << "; measured " << format_bytes(added) << "\n";
    EXPECT_GE(e.total(), added) << run << ": the estimate is below what the run holds";
    EXPECT_LE(e.total(), 1.33 * added) << run << ": the estimate is far above what the run holds";
  }
}

// Where per-query REPLAY's cotangents are what does not fit, the refusal names the most queries
// that do (and the query file); where the model itself does not fit, it says that instead.
TEST(MemoryEstimate, TooManyQueriesAreRefusedNamingTheMostThatFit) {
  const RunConfig config = testing::tiny_run_config({});
  MemoryEstimate e = estimate_run_memory(config);
  add_per_query_replay(config, 64, 1, 1000, e);
  ASSERT_GT(e.query_bytes, 0);
  const auto refusal = [&](double available) -> std::string {
    try {
      require_memory(config, e, static_cast<int64_t>(available));
    } catch (const InputError& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_EQ(refusal(e.total()), "");
  const std::string queries = refusal(e.total_without_queries() + 10.5 * static_cast<double>(e.query_bytes));
  EXPECT_NE(queries.find("per-query REPLAY holds each query's cotangents ("), std::string::npos) << queries;
  EXPECT_NE(queries.find("at most 10 of the 64 queries in " + config.query_path + " fit; split the query file"),
            std::string::npos)
      << queries;
  const std::string model = refusal(static_cast<double>(e.state_bytes));
  EXPECT_NE(model.find("the model alone needs"), std::string::npos) << model;
}

// Where the step's graph kept between the queries' products is what does not fit, the refusal
// names --retrace-per-query, whose estimate keeps no graph and fits.
TEST(MemoryEstimate, AKeptGraphThatDoesNotFitIsRefusedNamingRetrace) {
  const RunConfig config = testing::tiny_run_config({});
  MemoryEstimate kept = estimate_run_memory(config), again = kept;
  add_per_query_replay(config, 2, 1, 1000, kept);
  add_per_query_replay(config, 2, 1, 1000, again, /*retrace=*/true);
  ASSERT_GT(kept.kept_graph_bytes, 0);
  EXPECT_EQ(again.kept_graph_bytes, 0);
  EXPECT_EQ(again.total(), kept.total() - static_cast<double>(kept.kept_graph_bytes));
  const auto available = static_cast<int64_t>(again.total() + 0.5 * static_cast<double>(kept.kept_graph_bytes));
  std::string refusal;
  try {
    require_memory(config, kept, available);
  } catch (const InputError& error) {
    refusal = error.what();
  }
  EXPECT_NE(refusal.find("per-query REPLAY keeps each step's graph between the queries' products ("), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("add --retrace-per-query"), std::string::npos) << refusal;
  EXPECT_NO_THROW(require_memory(config, again, available));
}

// --dump's records, estimated before training, against the rank files a real run writes: the
// estimate bounds the largest rank's file and is within a fifth of it, on one process and on
// meshes where rows do not divide (4 over dp=3) and where cp pads the sequence.
TEST(MemoryEstimate, DumpBytesBoundEachRanksRecords) {
  const std::string path = testing::write_tiny_run_config("memory-dump", {});
  const RunConfig config = RunConfig::load(path);
  const LmProblem p = build_lm_problem(config);
  struct Case {
    std::string topology;
    DumpShards shards;
  };
  for (const Case& c : std::vector<Case>{{"", {}}, {"dp=3", {3, 1, 1}}, {"dp=2,cp=3,fsdp=2", {2, 3, 2}}}) {
    const std::string dump = ::testing::TempDir() + "/memory-dump.dump";
    std::filesystem::remove_all(dump);
    const auto run = testing::run_command(std::string(MAGIC_RUN_BINARY) + " --config " + path + " --top 0 --dump " +
                                          dump + (c.topology.empty() ? "" : " --topology " + c.topology));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    uintmax_t largest = 0;  // the tensors' bytes: the file less its length field and JSON header
    for (const auto& f : std::filesystem::directory_iterator(dump)) {
      if (f.path().extension() != ".safetensors") continue;
      uint64_t header = 0;
      std::ifstream(f.path(), std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
      largest = std::max<uintmax_t>(largest, f.file_size() - 8 - header);
    }
    const auto estimate =
        static_cast<double>(estimate_dump_bytes(config, p.weights.numel(), p.query->num_queries(), c.shards));
    std::cout << (c.topology.empty() ? "one process" : c.topology) << ": estimate " << format_bytes(estimate)
              << ", largest rank's tensors " << format_bytes(static_cast<double>(largest)) << "\n";
    EXPECT_GE(estimate, static_cast<double>(largest)) << c.topology;
    EXPECT_GE(static_cast<double>(largest), 0.8 * estimate) << c.topology;
    std::filesystem::remove_all(dump);
  }
}

}  // namespace
}  // namespace magic
