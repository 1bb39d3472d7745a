// exit_without_static_destructors: what the streams hold is written, the exit code is kept, and
// nothing registered to run at exit runs (the point: LibTorch's static destructors are skipped).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include "lib/core/process_exit.h"

namespace magic {
namespace {

// Runs `body` in a forked child that ends with exit_without_static_destructors(0, leaks) and
// returns its exit code and what it wrote to stderr.
template <typename Body>
std::pair<int, std::string> run_child(const Body& body, LeakCheck leaks) {
  int err[2];
  if (pipe(err) != 0) return {-1, "pipe failed"};
  const pid_t child = fork();
  if (child == 0) {
    dup2(err[1], STDERR_FILENO);
    close(err[0]);
    close(err[1]);
    body();
    exit_without_static_destructors(0, leaks);
  }
  close(err[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(err[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, static_cast<size_t>(n));
  close(err[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

TEST(ProcessExit, WritesWhatTheStreamsHoldKeepsTheCodeAndRunsNoExitHandler) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    std::atexit([] { std::fputs(" at-exit", stdout); });
    std::cout << "buffered";         // no newline, no flush
    std::fputs(" c-stdio", stdout);  // a full buffer of its own, stdout being a pipe
    exit_without_static_destructors(3);
  }
  close(out[1]);
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_EQ(text, "buffered c-stdio");
}

// _Exit skips LeakSanitizer's check at exit; a tool's process checks before it (ASan's exit code,
// 23 under the asan test preset, and the allocation's stack), a forked rank skips it (LibTorch's
// fork handler leaks there).
TEST(ProcessExit, UnderLeakSanitizerAToolsLeakEndsItsProcessNamingTheAllocation) {
#if !defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "only under the asan preset";
#else
  const auto leak = [] {
    int* lost = new int[7];
    asm volatile("" : : "r"(lost) : "memory");  // kept, so the allocation happens; then forgotten
  };
  const auto [code, text] = run_child(leak, LeakCheck::kRun);
  EXPECT_NE(code, 0) << text;
  EXPECT_NE(text.find("LeakSanitizer: detected memory leaks"), std::string::npos) << text;
  EXPECT_NE(text.find("Direct leak of 28 byte(s)"), std::string::npos) << text;
  const auto skipped = run_child(leak, LeakCheck::kSkipInForkedRank);
  EXPECT_EQ(skipped.first, 0) << skipped.second;
  const auto clean = run_child([] {}, LeakCheck::kRun);
  EXPECT_EQ(clean.first, 0) << clean.second;
#endif
}

}  // namespace
}  // namespace magic
