// The pipeline's trace points (lib/trace) seen through magic-run --dump: attaching the dump sink
// changes no score (bit for bit), the dump holds each step's records, and two runs that differ
// only in their learning rate first diverge where that difference enters: step 0's update.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lib/io/safetensors.h"
#include "lib/trace/dump_reader.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::string tiny_config(const std::string& name, double lr) {
  return testing::write_tiny_run_config(name, {}, [&](nlohmann::json& j) { j["optimizer"]["lr"] = lr; });
}

testing::CommandOutcome magic_run(const std::string& args) {
  return testing::run_command(std::string(MAGIC_RUN_BINARY) + " " + args);
}

std::string folder(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / "trace-points" / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p.string();
}

TEST(TracePoints, ADumpChangesNoScoreAndHoldsEveryStepsRecords) {
  const std::string config = tiny_config("trace-tiny", 0.5);
  const std::string plain = folder("plain"), dumped = folder("dumped"), dump = folder("run.dump");
  const auto a = magic_run("--config " + config + " --out " + plain);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto b = magic_run("--config " + config + " --out " + dumped + " --dump " + dump);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const at::Tensor x = load_safetensors(plain + "/scores.safetensors").tensors.at("scores");
  const at::Tensor y = load_safetensors(dumped + "/scores.safetensors").tensors.at("scores");
  EXPECT_TRUE(at::equal(x, y)) << "the dump sink changed the scores";

  const LoadedDump d = read_dump(dump);
  std::map<std::string, int> count;  // "kind/phase/order" at step 0
  int64_t last_step = -1;
  for (const auto& t : d.tensors) {
    const TraceRecord& r = t.record.record;
    last_step = std::max(last_step, r.step);
    if (r.step == 0) ++count[r.kind + "/" + r.phase + "/" + r.order];
  }
  // Token and position embeddings, 12 tensors per block (two norms, qkv and projection, two MLP
  // layers, each weight and bias), the final norm's two and the head.
  const int layers = testing::tiny_run_json({})["model"]["n_layers"].get<int>();
  const int params = 2 + 12 * layers + 3;
  EXPECT_EQ(count["input/forward/forward"], 1);
  EXPECT_EQ(count["activation/forward/forward"], layers);  // after each block
  EXPECT_EQ(count["logits/forward/forward"], 1);
  EXPECT_EQ(count["loss/forward/forward"], 1);
  EXPECT_EQ(count["gradient/backward/first"], params);
  EXPECT_EQ(count["reduced_gradient/reduction/first"], params);
  EXPECT_EQ(count["update/optimizer/first"], params);
  EXPECT_EQ(count["cotangent/replay/metagradient"], params);
  EXPECT_EQ(count["score/replay/metagradient"], 1);
  EXPECT_EQ(last_step, 5);  // the tiny run's 6 steps
  // REPLAY's per-step score contributions add up to the scores magic-run wrote, which are
  // recorded too (step -1), as assembled.
  at::Tensor sum = at::zeros_like(y);
  int assembled = 0;
  for (const auto& t : d.tensors) {
    if (t.record.record.kind != "score") continue;
    if (t.record.record.step >= 0) sum += t.whole;
    if (t.record.record.step < 0) {
      ++assembled;
      EXPECT_TRUE(at::equal(t.whole, y));
    }
  }
  EXPECT_EQ(assembled, 1);
  EXPECT_LE(testing::relative_error(sum, y), 1e-12);
}

TEST(TracePoints, TwoRunsThatDifferInTheirLearningRateFirstDivergeAtStepZerosUpdate) {
  const std::string one = folder("lr-a.dump"), two = folder("lr-b.dump");
  ASSERT_EQ(magic_run("--config " + tiny_config("trace-lr-a", 0.5) + " --dump " + one).exit_code, 0);
  ASSERT_EQ(magic_run("--config " + tiny_config("trace-lr-b", 0.4) + " --dump " + two).exit_code, 0);
  const auto compared = testing::run_command(std::string(MAGIC_COMPARE_BINARY) + " " + two + " " + one);
  EXPECT_EQ(compared.exit_code, 1) << compared.output;
  // Step 0's forward and gradients agree; the optimizer's update is the first record to differ.
  EXPECT_NE(compared.output.find("first divergence: step 0, optimizer, "), std::string::npos) << compared.output;
  EXPECT_NE(compared.output.find(" update, "), std::string::npos) << compared.output;
}

// A mesh run's ranks each write their pieces; reassembled by their placements, every record equals
// the single-process run's, and a run that differs (its learning rate) is caught at step 0's update.
TEST(TracePoints, AMeshRunsDumpReassemblesToTheSingleProcessRunsRecords) {
  const std::string config = tiny_config("trace-mesh", 0.5);
  const std::string one = folder("one.dump"), mesh = folder("mesh.dump"), other = folder("other.dump");
  ASSERT_EQ(magic_run("--config " + config + " --dump " + one).exit_code, 0);
  const auto m = magic_run("--config " + config + " --dump " + mesh + " --topology dp=2,cp=2,fsdp=2");
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find(" records per rank in " + mesh), std::string::npos) << m.output;
  EXPECT_TRUE(fs::exists(mesh + "/rank3.safetensors"));
  const LoadedDump d = read_dump(mesh);
  EXPECT_EQ(d.coords().size(), 4u);
  const auto same = testing::run_command(std::string(MAGIC_COMPARE_BINARY) + " " + mesh + " " + one);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("PASS: " + std::to_string(d.tensors.size()) + " of " + std::to_string(d.tensors.size())),
            std::string::npos)
      << same.output;

  ASSERT_EQ(magic_run("--config " + tiny_config("trace-mesh-b", 0.4) + " --dump " + other).exit_code, 0);
  const auto differs = testing::run_command(std::string(MAGIC_COMPARE_BINARY) + " " + mesh + " " + other);
  EXPECT_EQ(differs.exit_code, 1) << differs.output;
  EXPECT_NE(differs.output.find("first divergence: step 0, optimizer, "), std::string::npos) << differs.output;
}

TEST(TracePoints, DumpRefusesAFullFolder) {
  const std::string full = folder("full");
  fs::create_directories(full);
  std::ofstream(full + "/something") << "x";
  const auto a = magic_run("--config " + tiny_config("trace-refusals", 0.5) + " --dump " + full);
  EXPECT_EQ(a.exit_code, 2) << a.output;
  EXPECT_NE(a.output.find("exists and is not empty"), std::string::npos) << a.output;
}

// Records are held until the run ends: 20,000 steps of a 1.7M-parameter model fit without a dump
// (about 5 GiB of states) but its records would take about a TiB (four parameter-shaped records a
// step, 54 MiB), so the run is refused before it trains.
TEST(TracePoints, ADumpThatCannotFitIsRefusedBeforeTraining) {
  const std::string config = testing::write_tiny_run_config("trace-huge", {}, [](nlohmann::json& j) {
    j["model"]["d_model"] = 256;
    j["model"]["n_layers"] = 2;
    j["training"]["steps"] = 20000;
    j["optimizer"].erase("momentum");
  });
  for (const std::string topology : {"", " --topology dp=2"}) {
    const std::string dump = folder("huge.dump");
    const auto a = magic_run("--config " + config + " --dump " + dump + topology);
    EXPECT_EQ(a.exit_code, 2) << topology << a.output;
    EXPECT_NE(a.output.find("the dump's records "), std::string::npos) << a.output;
    EXPECT_NE(a.output.find("available; run without --dump"), std::string::npos) << a.output;
    // The summary line comes once the inputs are checked, just before training.
    EXPECT_EQ(a.output.find("estimated peak memory"), std::string::npos) << "it started: " << a.output;
    EXPECT_FALSE(fs::exists(dump));
  }
}

}  // namespace
}  // namespace magic
