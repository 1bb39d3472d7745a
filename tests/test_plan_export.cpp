// magic-run --export-plan: the flag's error paths (exit 2 before anything is trained, nothing
// half-written), the folder written whole, and a plan whose files are complete and agree with
// plan.json and with the run magic-run attributed (its order, its θ_0, its score file).
// The plan's numbers are checked against the library's own sources of them (DataStream, the
// tokenized data, gpt_init, the schedule), not against values written down here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "lib/core/error.h"
#include "lib/core/fnv1a.h"
#include "lib/core/strings.h"
#include "lib/io/atomic_folder.h"
#include "lib/io/safetensors.h"
#include "lib/model/gpt.h"
#include "lib/train/plan_export.h"
#include "tests/support.h"
#include "tests/tool_refusals.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using Outcome = testing::CommandOutcome;

Outcome run_magic_run(const std::string& args) {
  return testing::run_command(std::string(MAGIC_RUN_BINARY) + " " + args);
}

std::string temp_path(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  fs::remove_all(path);
  return path;
}

// The tiny test run with `edit` applied, written as a config file.
std::string config_with(
    const std::string& name, const testing::TinyRun& run,
    const std::function<void(nlohmann::json&)>& edit = [](nlohmann::json&) {}) {
  return testing::write_tiny_run_config(name, run, edit);
}

// Entries of `dir` (names), so a test can say nothing else appeared beside a folder.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A folder holding a file is refused at once, untouched, with nothing trained and no temporary
// folder left beside it.
TEST(PlanExport, AFolderThatHoldsFilesIsRefusedBeforeTraining) {
  const std::string parent = temp_path("plan-full-parent");
  const std::string dir = parent + "/plan";
  fs::create_directories(dir);
  std::ofstream(dir + "/keep.txt") << "mine";
  const Outcome o = run_magic_run("--config " + config_with("full", {}) + " --export-plan " + dir);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--export-plan " + dir + ": exists and is not empty; name a new or empty directory"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("examples from"), std::string::npos) << "trained despite a full folder:\n" << o.output;
  EXPECT_EQ(entries(dir), std::vector<std::string>{"keep.txt"});
  EXPECT_EQ(testing::read_file(dir + "/keep.txt"), "mine");
  EXPECT_EQ(entries(parent), std::vector<std::string>{"plan"});
}

// What a plan cannot express, and flags that cannot go with it: exit 2 naming the reason, before
// anything is trained, and no plan folder made.
TEST(PlanExport, IncompatibleFlagsAndRunsAreRefused) {
  const std::string config = config_with("flags", {});
  const std::string file = temp_path("plan-a-file");
  std::ofstream(file) << "x";
  const std::string plan = temp_path("plan-never");
  // The flags, judged in-process as magic-run parses them (tools/run_flags.h).
  const auto refusal = testing::magic_run_refusal;
  for (const auto& [args, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"--config " + config + " --export-plan " + plan + " --topology dp=2",
            "--export-plan: a plan describes the single-process run; drop --topology"},
           {"--config " + config + " --export-plan " + plan + " --out " + plan, "name two separate directories"},
           {"--config " + config + " --export-plan " + plan + " --out " + plan + "/scores",
            "name two separate directories"},
           {"--config " + config + " --export-plan " + plan + "/inner --out " + plan, "name two separate directories"},
           {"--config " + config + " --export-plan " + file,
            "--export-plan " + file + ": is a file; expected a directory"},
           {"--config " + config + " --export-plan /proc/magic-plan",
            "--export-plan /proc/magic-plan: cannot create it"}}) {
    const std::string refused = refusal(args);
    EXPECT_NE(refused.find(fragment), std::string::npos) << args << "\n" << refused;
    EXPECT_FALSE(fs::exists(plan)) << args;
  }
  EXPECT_EQ(refusal("--config " + config + " --export-plan " + plan), "(accepted)");
  // Through the program: an empty name (which the in-process judge's split on spaces cannot
  // pass), and the refusals that need the config, each exit 2 before anything trains.
  for (const auto& [args, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"--config " + config + " --export-plan ''", "--export-plan: expected a directory name"},
           {"--config " + config_with("bf16", {}, [](nlohmann::json& j) { j["dtype"] = "bf16"; }) + " --export-plan " +
                plan,
            "runs the mixed-precision policy 'bf16', which a plan cannot state"},
           {"--config " + testing::source_path("fixtures/runs/multimodal.json") + " --export-plan " + plan,
            "is a multimodal run (its \"encoder\" section), which the plan format cannot state yet"}}) {
    const Outcome o = run_magic_run(args);
    EXPECT_EQ(o.exit_code, 2) << args << "\n" << o.output;
    EXPECT_NE(o.output.find(fragment), std::string::npos) << args << "\n" << o.output;
    EXPECT_EQ(o.output.find("examples from"), std::string::npos) << "trained despite " << args;
    EXPECT_FALSE(fs::exists(plan)) << args;
  }
}

// The folder appears whole or not at all: a fill that fails half way, and a destination that
// fills up while the plan is written, leave neither the destination nor a temporary folder.
TEST(PlanExport, AFolderIsWrittenWholeOrNotAtAll) {
  const std::string parent = temp_path("atomic-folder");
  fs::create_directories(parent);
  const std::string dir = parent + "/plan";
  const auto half = [](const std::string& temp) {
    std::ofstream(temp + "/plan.json") << "{}";
    throw InputError("disk full");
  };
  EXPECT_EQ(testing::input_error_of([&] { write_folder_atomically(dir, "--export-plan", half); }), "disk full");
  EXPECT_EQ(entries(parent), std::vector<std::string>{});

  fs::create_directories(dir);  // empty: allowed, and replaced
  const auto filled_meanwhile = [&](const std::string& temp) {
    std::ofstream(temp + "/plan.json") << "{}";
    std::ofstream(dir + "/other.txt") << "theirs";
  };
  const std::string error =
      testing::input_error_of([&] { write_folder_atomically(dir, "--export-plan", filled_meanwhile); });
  EXPECT_NE(error.find("cannot move the finished folder into place"), std::string::npos) << error;
  EXPECT_EQ(entries(dir), std::vector<std::string>{"other.txt"});
  EXPECT_EQ(entries(parent), std::vector<std::string>{"plan"});

  fs::remove(dir + "/other.txt");
  write_folder_atomically(dir, "--export-plan", [](const std::string& temp) { std::ofstream(temp + "/a") << "1"; });
  EXPECT_EQ(entries(dir), std::vector<std::string>{"a"});
  EXPECT_EQ(entries(parent), std::vector<std::string>{"plan"});
}

// plan.json's description of each file (size, FNV-1a, every tensor's dtype and shape) matches
// the file, and no file is missing or extra.
void expect_files_as_described(const std::string& dir, const nlohmann::json& plan) {
  std::vector<std::string> listed{"plan.json"};
  for (const auto& f : plan.at("files")) {
    const std::string path = dir + "/" + f.at("file").get<std::string>();
    listed.push_back(f.at("file"));
    const std::string bytes = file_bytes(path);
    EXPECT_EQ(bytes.size(), f.at("bytes").get<size_t>()) << path;
    EXPECT_EQ(hex16(fnv1a(kFnvBasis, bytes.data(), bytes.size())), f.at("fnv1a64").get<std::string>()) << path;
    const SafetensorsFile file = load_safetensors(path);
    EXPECT_EQ(file.metadata.at("format"), kPlanFormat);
    std::vector<std::string> names;
    for (const auto& t : f.at("tensors")) {
      names.push_back(t.at("name"));
      const at::Tensor& x = file.tensors.at(t.at("name").get<std::string>());
      EXPECT_EQ(x.sizes().vec(), t.at("shape").get<std::vector<int64_t>>()) << path << " " << t.at("name");
      EXPECT_EQ(t.at("dtype"), x.scalar_type() == at::kLong ? "I64" : "F64") << path << " " << t.at("name");
    }
    EXPECT_EQ(names, file.tensors.names()) << path;
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(entries(dir), listed);
  EXPECT_EQ(listed,
            (std::vector<std::string>{"batches.safetensors", "init.safetensors", "plan.json", "queries.safetensors"}));
}

// The plan of a run is that run: the batches in the order DataStream gives, each row the
// tokenized example (padding rows -1), targets the next token, divisors as the reduction defines,
// θ_0 the seeded init, the schedule's rates, the checkpoint steps, and the score file's ids and
// shape.
void expect_plan_of_run(const testing::TinyRun& run, bool per_query) {
  const std::string name = str_cat("plan-of-", run.optimizer, "-", run.weights, per_query ? "-pq" : "");
  const std::string config_path = config_with(name, run);
  const std::string dir = temp_path(name), out = temp_path(name + "-out");
  const Outcome o = run_magic_run("--config " + config_path + " --export-plan " + dir + " --out " + out +
                                  (per_query ? " --per-query" : "") + " --top 0");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("wrote the run's plan to " + dir), std::string::npos) << o.output;
  const nlohmann::json plan = nlohmann::json::parse(testing::read_file(dir + "/plan.json"));
  EXPECT_EQ(plan.at("format"), kPlanFormat);
  EXPECT_EQ(plan.at("version"), kPlanVersion);
  expect_files_as_described(dir, plan);

  const RunConfig config = RunConfig::load(config_path);
  const LmProblem problem = build_lm_problem(config);
  const int64_t S = config.steps, B = config.batch_size, N = problem.train->size(), T = problem.train->max_len();
  const TensorTree batches = load_safetensors(dir + "/batches.safetensors").tensors;
  const at::Tensor ids = batches.at("input_ids"), targets = batches.at("targets"), rows = batches.at("example_index");
  ASSERT_EQ(ids.sizes().vec(), (std::vector<int64_t>{S, B, T}));
  int64_t padding_rows = 0;
  for (int64_t s = 0; s < S; ++s) {
    const std::vector<int64_t> order = problem.stream->rows(s);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t e = rows[s][b].item<int64_t>();
      if (order[b] == N) {
        EXPECT_EQ(e, -1);
        EXPECT_TRUE(targets[s][b].eq(kIgnoreLabel).all().item<bool>());
        ++padding_rows;
        continue;
      }
      ASSERT_EQ(e, order[b]) << "step " << s << " row " << b;
      EXPECT_TRUE(ids[s][b].equal(problem.train->input_ids[e])) << "step " << s << " row " << b;
      // Column j's target is the example's label j + 1; the last column predicts nothing.
      EXPECT_TRUE(targets[s][b].narrow(0, 0, T - 1).equal(problem.train->labels[e].narrow(0, 1, T - 1)));
      EXPECT_EQ(targets[s][b][T - 1].item<int64_t>(), kIgnoreLabel);
    }
    const at::Tensor valid = targets[s].ne(kIgnoreLabel).to(at::kDouble);
    const at::Tensor expected = config.reduction == Reduction::kMean         ? valid.sum().expand({B})
                                : config.reduction == Reduction::kSumOfMeans ? valid.sum(1).clamp_min(1.0)
                                                                             : at::ones({B}, at::kDouble);
    EXPECT_TRUE(batches.at("row_divisor")[s].equal(expected)) << "step " << s;
  }
  EXPECT_GT(padding_rows, 0) << "the run should end an epoch inside a batch";
  EXPECT_TRUE(batches.at("weights").equal(problem.weights));

  const TensorTree init = load_safetensors(dir + "/init.safetensors").tensors;
  const TensorTree seeded = gpt_init(config.model, at::kDouble, config.seed);
  EXPECT_EQ(init.names(), seeded.names());
  for (const auto& p : seeded) EXPECT_TRUE(init.at(p.name).equal(p.tensor)) << p.name;
  const auto& parameters = plan.at("model").at("parameters");
  ASSERT_EQ(parameters.size(), seeded.size());
  for (size_t i = 0; i < parameters.size(); ++i) EXPECT_EQ(parameters[i].at("name"), seeded.names()[i]);

  const auto lr = plan.at("optimizer").at("lr").get<std::vector<double>>();
  ASSERT_EQ(static_cast<int64_t>(lr.size()), S);
  for (int64_t s = 0; s < S; ++s) EXPECT_EQ(lr[s], config.optimizer.schedule.at(s)) << "step " << s;
  EXPECT_EQ(plan.at("training").at("checkpoints").at("steps").get<std::vector<int64_t>>(),
            checkpoint_steps(config.checkpoints, S));
  EXPECT_EQ(plan.at("optimizer").at("clip").is_null(), !config.optimizer.clip_norm.has_value());

  const TensorTree queries = load_safetensors(dir + "/queries.safetensors").tensors;
  EXPECT_TRUE(queries.at("input_ids").equal(problem.query->queries().input_ids));
  EXPECT_EQ(queries.at("document").max().item<int64_t>() + 1, plan.at("queries").at("documents").get<int64_t>());

  const SafetensorsFile scores = load_safetensors(out + "/scores.safetensors");
  EXPECT_EQ(nlohmann::json::parse(scores.metadata.at("example_ids")), plan.at("data").at("example_ids"));
  EXPECT_EQ(scores.tensors.at("scores").sizes().vec(), plan.at("scores").at("shape").get<std::vector<int64_t>>());
  EXPECT_EQ(plan.at("queries").at("per_query"), per_query);
  if (per_query) {
    EXPECT_EQ(nlohmann::json::parse(scores.metadata.at("query_ids")), plan.at("queries").at("ids"));
  }
}

TEST(PlanExport, ThePlanIsTheRunAdamwClippedPerDocument) {
  testing::TinyRun run;
  run.optimizer = "adamw";
  run.schedule = "cosine";
  run.clip = true;
  run.batch_size = 5;  // the tiny run's examples do not fill whole batches: padding rows
  expect_plan_of_run(run, /*per_query=*/false);
}

TEST(PlanExport, ThePlanIsTheRunSgdPerTokenPerQuery) {
  testing::TinyRun run;
  run.weights = "per_token";
  run.reduction = "sum_of_means";
  run.batch_size = 5;
  expect_plan_of_run(run, /*per_query=*/true);
}

// An existing empty directory is the folder asked for: the plan replaces it.
TEST(PlanExport, AnEmptyDirectoryIsAccepted) {
  const std::string dir = temp_path("plan-empty");
  fs::create_directories(dir);
  const Outcome o = run_magic_run("--config " + config_with("empty", {}) + " --export-plan " + dir + " --top 0");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(fs::exists(dir + "/plan.json"));
}

}  // namespace
}  // namespace magic
