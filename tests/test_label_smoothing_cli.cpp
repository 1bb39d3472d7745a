// Label smoothing on the command line: magic-check --label-smoothing passes at every level at fp64
// and records ε in its JSON report; magic-run's training.label_smoothing gives the single
// process's scores on dp=2 (and other scores than ε = 0); both refuse ε outside [0, 1) with exit 2
// naming the flag or key.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "lib/io/safetensors.h"
#include "tests/support.h"
#include "tests/tool_refusals.h"

namespace magic {
namespace {

testing::CommandOutcome magic_check(const std::string& args) {
  return testing::run_command(std::string(MAGIC_CHECK_BINARY) + " " + args);
}

std::string smoothed_config(const std::string& name, const nlohmann::json& eps) {
  return testing::write_tiny_run_config(name, {}, [&](nlohmann::json& j) {
    j["optimizer"] = {{"name", "adamw"}, {"lr", 0.01}, {"clip_norm", 1.0}};
    j["training"]["label_smoothing"] = eps;
  });
}

at::Tensor scores_of(const std::string& out) {
  return load_safetensors(out + "/scores.safetensors").tensors.at("scores");
}

TEST(LabelSmoothingCli, MagicCheckPassesAtEveryLevelAndRecordsEpsilon) {
  const std::string json = ::testing::TempDir() + "/label-smoothing.json";
  auto o = magic_check("--launch threads --topology dp=2,cp=2 --steps 2 --label-smoothing 0.1 --json " + json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("PASS: "), std::string::npos) << o.output;
  auto report = nlohmann::json::parse(testing::read_file(json));
  EXPECT_EQ(report["label_smoothing"].get<double>(), 0.1);
  for (const auto& row : report["checks"]) EXPECT_LE(row["worst_rel_err"].get<double>(), 1e-9) << row.dump();
}

TEST(LabelSmoothingCli, OutOfRangeExitsTwoNamingTheFlagOrKey) {
  // magic-check's flags judged in-process, as the program parses them (tools/check_command.h).
  const auto refusal = testing::magic_check_refusal;
  for (const std::string bad : {"1", "-0.1", "1.5"}) {
    const std::string refused = refusal("--launch threads --topology dp=2 --steps 1 --label-smoothing " + bad);
    EXPECT_NE(refused.find("--label-smoothing: expected a number in [0, 1), got"), std::string::npos) << refused;
  }
  const std::string spd =
      refusal("--launch threads --topology n_ci=2,n_per_block=1,n_blocks=2,n_ppgd=1 --label-smoothing 0.1");
  EXPECT_NE(spd.find("--label-smoothing: the three-pool workload"), std::string::npos) << spd;
  const std::string both =
      refusal("--launch threads --topology dp=2 --config " + smoothed_config("ls-ok", 0.1) + " --label-smoothing 0.2");
  EXPECT_NE(both.find("--label-smoothing: comes from --config"), std::string::npos) << both;
  EXPECT_EQ(refusal("--launch threads --topology dp=2 --label-smoothing 0.1"), "(accepted)");
  // Through the programs: exit 2, and magic-run leaves nothing half-written.
  auto o = magic_check("--launch threads --topology dp=2 --steps 1 --label-smoothing 1");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--label-smoothing: expected a number in [0, 1), got"), std::string::npos) << o.output;
  const std::string config = smoothed_config("ls-bad", 1.0);
  const std::string out = testing::fresh_dir("ls-bad-out");
  auto run = testing::magic_run("--config " + config + " --out " + out);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("training.label_smoothing"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("expected a number in [0, 1), got 1"), std::string::npos) << run.output;
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing half-written";
}

TEST(LabelSmoothingCli, MagicRunScoresOnDpTwoEqualTheSingleProcess) {
  const std::string config = smoothed_config("ls-run", 0.1);
  const std::string single = testing::fresh_dir("ls-single"), mesh = testing::fresh_dir("ls-mesh"),
                    plain = testing::fresh_dir("ls-plain");
  auto one = testing::magic_run("--config " + config + " --out " + single);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = testing::magic_run("--config " + config + " --topology dp=2 --out " + mesh);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto zero = testing::magic_run("--config " + smoothed_config("ls-zero", 0.0) + " --out " + plain);
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  const at::Tensor a = scores_of(single), d = scores_of(mesh);
  const double error = (d - a).abs().max().item<double>() / a.abs().max().item<double>();
  std::printf("label smoothing 0.1, dp=2 vs single process: relative error %.3g\n", error);
  EXPECT_LE(error, 1e-10);
  const at::Tensor p = scores_of(plain);
  EXPECT_GT((a - p).abs().max().item<double>() / p.abs().max().item<double>(), 1e-3) << "ε changed nothing";
  // run.json records the config as read, the key with it.
  auto record = nlohmann::json::parse(testing::read_file(single + "/run.json"));
  EXPECT_EQ(record["config"]["training"]["label_smoothing"].get<double>(), 0.1);
}

}  // namespace
}  // namespace magic
