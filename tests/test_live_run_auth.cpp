// The tracer of a real magic-run with its token (issue 46): the run prints the viewer's URL with a
// token made for it, serves nothing without it, and neither 2,000 connections without it nor the
// refusals change the run: the viewer with the token gets in, the run (held to 1,024 file
// descriptors, where such a flood once made it fail with "Too many open files") ends as it does
// without the tracer, scores bit-identical.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "lib/io/safetensors.h"
#include "tests/live_run.h"
#include "tests/support.h"

namespace magic {
namespace {

at::Tensor scores_of(const std::string& out) {
  return load_safetensors(out + "/scores.safetensors").tensors.at("scores");
}

TEST(LiveRunAuth, AFloodWithoutTheTokenNeitherKeepsTheViewerOutNorChangesTheScores) {
  if (!testing::allow_descriptors(2600)) GTEST_SKIP() << "needs 2,600 file descriptors";
  const std::string config = testing::write_tiny_run_config("live-auth", testing::TinyRun{});
  const std::string plain = testing::fresh_dir("live-auth-plain"), traced = testing::fresh_dir("live-auth-traced");
  ASSERT_EQ(testing::magic_run("--config " + config + " --out " + plain).exit_code, 0);
  testing::BackgroundRun run("--config " + config + " --out " + traced + " --trace-port 0 --trace-wait 60",
                             ::testing::TempDir() + "/live-auth.log",
                             std::string("ulimit -n 1024 2>/dev/null; ") + MAGIC_RUN_BINARY);
  const int port = run.port();
  ASSERT_GT(port, 0) << run.join().output;
  EXPECT_TRUE(std::regex_match(run.token(), std::regex("[A-Za-z0-9_-]{32}"))) << run.token();

  EXPECT_EQ(http_request(port, "/").status, 401);
  EXPECT_EQ(http_request(port, "/?token=" + run.token()).status, 200);
  EXPECT_THROW(TraceClient(port, "/trace"), std::runtime_error);
  const std::vector<int> held = testing::open_tokenless_flood(port, 2000);
  ASSERT_EQ(held.size(), 2000u);
  const auto start = std::chrono::steady_clock::now();
  TraceClient viewer(port, "/trace", "", run.token());
  const StreamCheck seen = read_stream(viewer);
  const auto outcome = run.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::map<std::string, int> fates = testing::connection_fates(held);
  testing::close_all(held);
  std::cout << "the run's 2000 held: " << fates["HTTP/1.1 401 Unauthorized"] << " refused (401), " << fates["closed"]
            << " closed unanswered, " << fates["open"] << " still waiting; the viewer read the whole stream in "
            << seconds << " s\n";

  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_EQ(seen.error, "");
  EXPECT_GT(seen.records, 0);
  EXPECT_EQ(seen.history, 0);  // the first client held the run: every record came live
  EXPECT_EQ(seen.records + seen.dropped, seen.end_records);
  EXPECT_EQ(outcome.output.find("Too many open files"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find(": no token (HTTP 401)"), std::string::npos) << outcome.output;
  EXPECT_GE(fates["HTTP/1.1 401 Unauthorized"], 900);
  EXPECT_TRUE(at::equal(scores_of(plain), scores_of(traced)));
  for (const std::string& d : {plain, traced}) std::filesystem::remove_all(d);
}

TEST(LiveRunAuth, AGivenTokenIsUsedNoneIsLoopbackOnlyAndABindBeyondIsWarnedOf) {
  const std::string config = testing::write_tiny_run_config("live-auth-flags", testing::TinyRun{});
  const std::string given = "a-token-given-by-flag_0123";
  const testing::WatchedRun with_given = testing::watch_run(
      "--config " + config + " --trace-port 0 --trace-wait 30 --trace-token " + given, ::testing::TempDir() + "/g.log");
  ASSERT_EQ(with_given.outcome.exit_code, 0) << with_given.outcome.output;
  EXPECT_EQ(with_given.seen.error, "");
  EXPECT_NE(with_given.outcome.output.find("/?token=" + given + " (viewer)"), std::string::npos);

  const testing::WatchedRun without = testing::watch_run(
      "--config " + config + " --trace-port 0 --trace-wait 30 --trace-token none", ::testing::TempDir() + "/n.log");
  ASSERT_EQ(without.outcome.exit_code, 0) << without.outcome.output;
  EXPECT_EQ(without.seen.error, "");  // a client with no token served
  EXPECT_EQ(without.outcome.output.find("token="), std::string::npos) << without.outcome.output;

  // Beyond loopback: a warning line, and the token asked all the same.
  const auto wide = testing::magic_run("--config " + config + " --trace-port 0 --trace-bind 0.0.0.0");
  ASSERT_EQ(wide.exit_code, 0) << wide.output;
  EXPECT_NE(wide.output.find("trace: warning: --trace-bind 0.0.0.0 serves the tracer beyond this machine"),
            std::string::npos)
      << wide.output;
  EXPECT_NE(wide.output.find("/?token="), std::string::npos) << wide.output;

  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--trace-port 0 --trace-token short", "--trace-token: expected 16 to 256 characters of A-Z a-z 0-9 _ -"},
      {"--trace-port 0 --trace-token 'a token with spaces in it'", "--trace-token: expected 16 to 256"},
      {"--trace-port 0 --trace-bind 0.0.0.0 --trace-token none",
       "--trace-token none: only with a loopback --trace-bind (127.0.0.1, ::1), not 0.0.0.0"},
      {"--trace-token " + given, "--trace-token: needs --trace-port"},
  };
  for (const auto& [flags, expected] : refused) {
    const auto r = testing::magic_run("--config " + config + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << flags << "\n" << r.output;
    EXPECT_EQ(r.output.find("magic-run:"), r.output.rfind("magic-run:")) << "one line: " << r.output;
  }
}

}  // namespace
}  // namespace magic
