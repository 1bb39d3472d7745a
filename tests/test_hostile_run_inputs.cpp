// Inputs a careless or hostile user gives magic-run (issue 46's probes), each refused in one line
// with exit 2, naming the file and the bound it broke, before anything is built or written: run
// under a 6 GB address-space limit, so a bound that stops holding fails here as an allocation
// error instead of exhausting the machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "lib/core/strings.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::string write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// The 6 GB limit. Under AddressSanitizer, whose shadow memory alone reserves terabytes of address
// space, ASan's own limit on resident memory stands in for the address-space one.
#ifdef __SANITIZE_ADDRESS__
constexpr const char* kMemoryLimit = "export ASAN_OPTIONS=\"${ASAN_OPTIONS}:hard_rss_limit_mb=6000\"; ";
#else
constexpr const char* kMemoryLimit = "ulimit -v 6000000; ";
#endif

// The one error line of a refused run.
std::string refusal(const std::string& args, const std::string& out) {
  const testing::CommandOutcome o = testing::run_command(
      str_cat(kMemoryLimit, MAGIC_RUN_BINARY, " ", args, " --out ", out), std::chrono::seconds(60));
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << "expected one line:\n" << o.output;
  EXPECT_FALSE(fs::exists(out)) << "a refused run created " << out;
  return o.output;
}

class HostileRunInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(HostileRunInputs, YamlAliasesThatReferToThemselvesOrExpandABillionTimesStop) {
  // Used to end in a segmentation fault.
  const std::string self = write_file(dir_ + "/self.yaml", "model: &m\n  d: *m\n");
  EXPECT_EQ(
      refusal("--config " + self, dir_ + "/out"),
      "magic-run: error: " + self + ": line 1: nested deeper than 128 (the bounds on a YAML config: docs/limits.md)\n");
  // Nine aliases to the level below, ten levels: 9^10 values, which grew past 1.3 GB.
  std::string laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char level = 'b'; level <= 'k'; ++level) {
    std::string row = str_cat(level, ": &", level, " [");
    for (int i = 0; i < 9; ++i) row += str_cat(i ? ", " : "", "*", static_cast<char>(level - 1));
    laughs += row + "]\n";
  }
  const std::string bomb = write_file(dir_ + "/laughs.yaml", laughs);
  const std::string line = refusal("--config " + bomb, dir_ + "/out");
  EXPECT_NE(line.find(bomb + ": line "), std::string::npos) << line;
  EXPECT_NE(line.find("more than 100000 values once its aliases are expanded"), std::string::npos) << line;
}

// Found by the fuzz harnesses (fuzz/run_config.cpp; their inputs are in fixtures/fuzz/run_config).
TEST_F(HostileRunInputs, WhatTheFuzzerFoundInConfigsIsOneLineNamingTheFile) {
  // yaml-cpp's LoadAll yielded empty documents without end on a ',' outside brackets.
  const std::string comma = write_file(dir_ + "/comma.yaml", "\"x\", y\n");
  EXPECT_EQ(refusal("--config " + comma, dir_ + "/out"),
            "magic-run: error: " + comma +
                ": invalid YAML at line 1, column 4: text after the document's end (a ',' outside brackets?)\n");
  // A number past a double's range escaped as "failed: [json.exception.out_of_range.406] ...".
  const std::string huge = write_file(dir_ + "/huge.json", "{\"seed\": 1e400}");
  EXPECT_EQ(refusal("--config " + huge, dir_ + "/out"),
            "magic-run: error: " + huge + ": invalid JSON: number overflow parsing '1e400'\n");
  // The parser's message quotes the byte it stopped at: escaped, never sent to the terminal raw.
  const std::string raw = write_file(dir_ + "/raw.json", "{\"seed\": \"\xff\x1b[2J\"}");
  const std::string line = refusal("--config " + raw, dir_ + "/out");
  EXPECT_NE(line.find(raw + ": invalid JSON at line 1, column "), std::string::npos) << line;
  EXPECT_NE(line.find("\\xFF"), std::string::npos) << line;
  EXPECT_EQ(line.find('\xff'), std::string::npos) << line;
}

TEST_F(HostileRunInputs, AJsonValueNestedDeepIsRefusedBeforeItOverflowsTheStack) {
  // 100,000 deep in a key's value used to crash the error message that printed it.
  const std::string deep = testing::write_tiny_run_config(
      "deep-value", {}, [](nlohmann::json& j) { j["model"]["d_model"] = nlohmann::json::array(); });
  std::string text = testing::read_file(deep);
  text.replace(text.find("[]"), 2, std::string(100000, '[') + std::string(100000, ']'));
  write_file(deep, text);
  EXPECT_NE(refusal("--config " + deep, dir_ + "/out").find(deep + ": nested deeper than 128 at line "),
            std::string::npos);
}

TEST_F(HostileRunInputs, ModelSizesAreRefusedByTheMemoryEstimateBeforeAnyTensorExists) {
  const std::string config = testing::write_tiny_run_config("huge-model", {});
  // Each ended in std::bad_alloc, or (a billion layers) in a loop that built them one by one.
  for (const std::string flag : {"--model.vocab 2147483648", "--model.d_model 65536", "--model.max_len 1000000000",
                                 "--model.n_layers 1000000000"}) {
    const std::string line = refusal("--config " + config + " " + flag, dir_ + "/out");
    EXPECT_NE(line.find("the model alone needs "), std::string::npos) << flag << ": " << line;
    EXPECT_NE(line.find("lower model.d_model, model.n_layers, model.vocab or model.max_len"), std::string::npos);
  }
}

TEST_F(HostileRunInputs, ADataFileThatIsNoRegularFileOrHasAHugeLineIsRefused) {
  for (const std::string device : {"/dev/zero", "/dev/urandom"}) {
    const std::string config =
        testing::write_tiny_run_config("device-data", {}, [&](nlohmann::json& j) { j["data"]["train"] = device; });
    EXPECT_NE(refusal("--config " + config, dir_ + "/out").find(device + ": is a device, expected a data file"),
              std::string::npos);
  }
  // One line of 17 MiB: past the 16 MiB a line may hold, refused without reading it whole.
  const std::string huge = dir_ + "/huge.jsonl";
  std::ofstream(huge) << "{\"id\": \"a\", \"text\": \"ok\"}\n{\"text\": \"" << std::string(17 << 20, 'x') << "\"}\n";
  const std::string config =
      testing::write_tiny_run_config("huge-line", {}, [&](nlohmann::json& j) { j["data"]["train"] = huge; });
  EXPECT_NE(refusal("--config " + config, dir_ + "/out")
                .find(huge + ": line 2 is longer than 16777216 bytes (the bound on one line: docs/limits.md)"),
            std::string::npos);
}

}  // namespace
}  // namespace magic
