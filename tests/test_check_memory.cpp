// magic-check on long checks: a check too long for the machine is refused before any rank starts
// (with both reports), the memory estimate bounds what a check really grows by per step, and
// SIGINT/SIGTERM during the reference runs (before any launcher supervises) ends the check with
// exit 2 and both reports instead of the raw signal.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "checks/check_memory.h"
#include "lib/core/strings.h"
#include "tests/support.h"
#include "tests/xml_reader.h"

namespace magic {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

// Starts magic-check with `args`, its output into `output_path`; returns its pid.
pid_t start_magic_check(const std::string& args, const std::string& output_path) {
  const std::string command = str_cat("exec ", MAGIC_CHECK_BINARY, " ", args, " > ", output_path, " 2>&1");
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits for `pid` up to `limit` (killing it after that); its status and resource usage.
struct Ended {
  bool in_time = false;
  int status = 0;
  rusage usage{};
};
Ended wait_for(pid_t pid, std::chrono::seconds limit) {
  Ended e;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (wait4(pid, &e.status, WNOHANG, &e.usage) == pid) {
      e.in_time = true;
      return e;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  wait4(pid, &e.status, 0, &e.usage);
  return e;
}

// Peak resident memory of one whole check: --launch threads keeps every rank in one process.
double peak_bytes(const std::string& topology, int64_t steps) {
  const std::string out = temp_path("peak.txt");
  const pid_t pid = start_magic_check(str_cat("--launch threads --topology ", topology, " --steps ", steps), out);
  const Ended e = wait_for(pid, std::chrono::seconds(240));
  EXPECT_TRUE(e.in_time && WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0) << testing::read_file(out);
  return static_cast<double>(e.usage.ru_maxrss) * 1024.0;
}

bool caught(pid_t pid, int sig) {
  std::ifstream status(str_cat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1ULL;
  }
  return false;
}

TEST(CheckMemory, ACheckTooLongForTheMachineIsRefusedBeforeAnyRankStartsWithBothReports) {
  for (const std::string topology : {"dp=2", "n_ci=4,n_per_block=2"}) {
    SCOPED_TRACE(topology);
    const std::string json = temp_path("huge.json"), junit = temp_path("huge.xml");
    const auto o = testing::run_command(str_cat(MAGIC_CHECK_BINARY, " --topology ", topology,
                                                " --steps 99999999999 --json ", json, " --junit ", junit));
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_NE(o.output.find("--steps 99999999999: this check needs about "), std::string::npos) << o.output;
    EXPECT_NE(o.output.find(" available; about "), std::string::npos) << o.output;
    EXPECT_NE(o.output.find(" steps fit"), std::string::npos) << o.output;
    // No rank started: the launcher makes its log folder before the first rank.
    for (const auto& entry : std::filesystem::directory_iterator(::testing::TempDir())) {
      EXPECT_EQ(entry.path().filename().string().rfind("magic-ranks-", 0), std::string::npos) << entry.path();
    }
    const auto report = nlohmann::json::parse(testing::read_file(json));
    EXPECT_EQ(report["passed"], false);
    EXPECT_NE(report["failure"].get<std::string>().find("this check needs about"), std::string::npos) << report;
    EXPECT_EQ(testing::parse_xml(testing::read_file(junit))->attributes.at("failures"), "1");
  }
}

// Measured between 8 and 40 steps (the difference cancels LibTorch and what does not grow); the
// estimate may be above, by less than twice, never below.
// Two 40-step runs a layout: label `long` (long.more_cases); MemoryEstimate.BoundsWhatARealRunAddsToLibTorch
// bounds a real run in the default suite.
TEST(CheckMemoryLong, TheEstimatePerStepBoundsTheMeasuredGrowthWithinTwice) {
  if (std::getenv("MAGIC_LONG_TESTS") == nullptr) GTEST_SKIP() << "long: ctest --preset long";
  for (const auto& [topology, optimizer] :
       std::vector<std::pair<std::string, std::string>>{{"dp=2,cp=2", "adamw"}, {"n_ci=2,n_per_block=1", "adamw"}}) {
    SCOPED_TRACE(topology);
    const double measured = (peak_bytes(topology, 40) - peak_bytes(topology, 8)) / 32.0;
    checks::CheckSettings s;
    s.topology = dist::TopologySpec::parse(topology);
    s.optimizer = optimizer;
    const double estimated = checks::estimate_check_memory(s, 0).per_step();
    EXPECT_GE(estimated, measured) << "estimated " << estimated << " B/step, measured " << measured;
    EXPECT_LE(estimated, 2.0 * measured) << "estimated " << estimated << " B/step, measured " << measured;
  }
}

TEST(CheckMemory, SigtermDuringTheReferenceRunEndsTheCheckWithExitTwoAndBothReports) {
  const std::string out = temp_path("sigterm.txt"), json = temp_path("sigterm.json"), junit = temp_path("sigterm.xml");
  const pid_t pid = start_magic_check(str_cat("--topology dp=2 --steps 400 --json ", json, " --junit ", junit), out);
  // The handler is installed when the reference runs start (400 steps: many seconds), before the
  // launcher's own (which would report "interrupted by signal 15" after stopping the ranks).
  const auto start = std::chrono::steady_clock::now();
  while (!caught(pid, SIGTERM)) {
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << testing::read_file(out);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const Ended e = wait_for(pid, std::chrono::seconds(60));
  const std::string output = testing::read_file(out);
  ASSERT_TRUE(e.in_time) << output;
  ASSERT_TRUE(WIFEXITED(e.status)) << "ended by signal " << WTERMSIG(e.status) << "\n" << output;
  EXPECT_EQ(WEXITSTATUS(e.status), 2) << output;
  // In the first phase that loops over the steps (the clip norm's gradients), or a later one.
  EXPECT_NE(output.find("magic-check: interrupted: stopped by signal 15 (SIGTERM) during "), std::string::npos)
      << output;
  EXPECT_NE(output.find(" of 400"), std::string::npos) << output;
  const auto report = nlohmann::json::parse(testing::read_file(json));
  EXPECT_NE(report["failure"].get<std::string>().find("SIGTERM"), std::string::npos) << report;
  EXPECT_EQ(testing::parse_xml(testing::read_file(junit))->attributes.at("failures"), "1");
}

}  // namespace
}  // namespace magic
