// A rank that raises an error of its own inside the distributed pipeline (MAGIC_RAISE_AT,
// lib/distributed/runtime/raise_hook.h: a genuine c10 IndexError) while the others wait for it in
// their collectives: magic-check names that rank, its phase and its message first, every time,
// lists the ranks that failed waiting for it after it, exits 1 (the code under test failed) and
// puts the rank, phase and message into the JSON and JUnit reports. Before the fix the headline
// named a bystander in about half of the runs, and the exit code was 2.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

#include "lib/core/strings.h"
#include "tests/support.h"
#include "tests/xml_reader.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPhase = "step gradients at step 0";

struct RaisedRun {
  testing::CommandOutcome outcome;
  nlohmann::json report;
  std::unique_ptr<testing::XmlElement> junit;
};

// dp=2,cp=2 with rank 2 raising as it enters kPhase; ranks 0, 1 and 3 wait for it. Everything the
// run leaves (reports, the kept rank logs) is removed before returning.
RaisedRun run_raising(const std::string& launch, int attempt) {
  const std::string dir = ::testing::TempDir() + str_cat("/crash-blame-", launch, "-", attempt);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string json = dir + "/report.json", junit = dir + "/report.xml";
  RaisedRun run;
  run.outcome = testing::run_command(
      str_cat("TMPDIR=", dir, " MAGIC_RAISE_AT='", kPhase, ":rank=2' ", MAGIC_CHECK_BINARY, " --launch ", launch,
              " --topology dp=2,cp=2 --checks grad --steps 1 --timeout 20 --json ", json, " --junit ", junit),
      std::chrono::seconds(120));
  run.report = nlohmann::json::parse(testing::read_file(json), nullptr, /*allow_exceptions=*/false);
  const std::string xml = testing::read_file(junit);
  if (!xml.empty()) run.junit = testing::parse_xml(xml);
  fs::remove_all(dir);
  return run;
}

// The reports name rank 2, its phase and its message.
void expect_reports_name_rank_two(const RaisedRun& run) {
  const auto& r = run.report;
  ASSERT_TRUE(r.is_object()) << run.outcome.output;
  EXPECT_EQ(r["passed"], false);
  EXPECT_NE(r["failure"].get<std::string>().find("rank 2 of 4"), std::string::npos) << r.dump(2);
  ASSERT_TRUE(r["failed_rank"].is_object()) << r.dump(2);
  EXPECT_EQ(r["failed_rank"]["rank"], 2) << r.dump(2);
  EXPECT_EQ(r["failed_rank"]["kind"], "failed") << r.dump(2);
  EXPECT_EQ(r["failed_rank"]["phase"], kPhase) << r.dump(2);
  EXPECT_NE(r["failed_rank"]["message"].get<std::string>().find("index out of range"), std::string::npos) << r.dump(2);
  ASSERT_NE(run.junit, nullptr) << run.outcome.output;
  EXPECT_EQ(run.junit->attributes.at("failures"), "1");
  const auto cases = run.junit->all("testsuite")[0]->all("testcase");
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0]->attributes.at("classname"), "rank 2");
  EXPECT_EQ(cases[0]->attributes.at("name"), kPhase);
  const auto failure = cases[0]->all("failure");
  ASSERT_EQ(failure.size(), 1u);
  EXPECT_EQ(failure[0]->attributes.at("type"), "failed");
  const std::string message = failure[0]->attributes.at("message");
  EXPECT_NE(message.find("rank 2 of 4"), std::string::npos) << message;
  EXPECT_NE(message.find("index out of range"), std::string::npos) << message;
}

void expect_no_stack_frames(const std::string& output) {
  EXPECT_EQ(output.find("frame #"), std::string::npos) << output;
  EXPECT_EQ(output.find("Exception raised from"), std::string::npos) << output;
}

TEST(CrashBlame, TheRankThatRaisesIsNamedFirstEveryTimeAndTheCheckFails) {
  // The first line naming a rank of the four is the headline: no bystander before it.
  const std::regex headline(
      "magic-check: rank (\\d) of 4 \\(pid \\d+\\) (.*) in phase '([^']*)': (.*); its log: \\S+rank-\\d\\.log");
  for (int attempt = 0; attempt < 6; ++attempt) {
    SCOPED_TRACE(str_cat("attempt ", attempt));
    const RaisedRun run = run_raising("spawn", attempt);
    const std::string& out = run.outcome.output;
    EXPECT_EQ(run.outcome.exit_code, 1) << out;
    std::smatch named;
    ASSERT_TRUE(std::regex_search(out, named, headline)) << out;
    EXPECT_EQ(named[1], "2") << out;
    EXPECT_EQ(named[2], "failed with its own error") << out;
    EXPECT_EQ(named[3], kPhase) << out;
    EXPECT_EQ(named[4], "failed: index out of range in self") << out;
    // The consequences follow, one line per state: the ranks that failed (or still were) waiting
    // for rank 2.
    const std::string after = named.suffix();
    EXPECT_NE(after.find("magic-check:   rank"), std::string::npos) << out;
    EXPECT_NE(after.find("waiting in "), std::string::npos) << out;
    EXPECT_EQ(out.find("rank 2 of 4", out.find("rank 2 of 4") + 1), std::string::npos) << "named once:\n" << out;
    expect_no_stack_frames(out);
    expect_reports_name_rank_two(run);
  }
}

TEST(CrashBlame, TheRankThreadThatRaisesIsNamedFirstToo) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    SCOPED_TRACE(str_cat("attempt ", attempt));
    const RaisedRun run = run_raising("threads", attempt);
    const std::string& out = run.outcome.output;
    EXPECT_EQ(run.outcome.exit_code, 1) << out;
    EXPECT_NE(out.find(str_cat("magic-check: rank 2 of 4 (thread) failed with its own error in phase '", kPhase,
                               "': failed: index out of range in self\n")),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("magic-check:   rank"), std::string::npos) << out;
    expect_no_stack_frames(out);
    expect_reports_name_rank_two(run);
  }
}

// magic-run names the same rank through the same launcher, but keeps exit 2 for it: its 1 means a
// run stopped on a non-finite value (whose checkpoints are discarded), and a crashed run is one
// to fix and resume.
TEST(CrashBlame, MagicRunNamesTheRankThatRaisesAndKeepsExitTwo) {
  const std::string dir = ::testing::TempDir() + "/crash-blame-run";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string config = testing::write_tiny_run_config("crash-blame", {});
  const auto o =
      testing::run_command(str_cat("TMPDIR=", dir, " MAGIC_RAISE_AT='training step 2 of 6:rank=1' ", MAGIC_RUN_BINARY,
                                   " --config ", config, " --topology dp=2 --out ", dir, "/out"),
                           std::chrono::seconds(120));
  fs::remove_all(dir);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("magic-run: rank 1 of 2 (pid "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(") failed with its own error in phase 'training step 2 of 6': failed: index out of range in "
                          "self; its log: "),
            std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("magic-run:   rank 0: "), std::string::npos) << o.output;
  expect_no_stack_frames(o.output);
}

}  // namespace
}  // namespace magic
