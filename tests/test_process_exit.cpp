// exit_without_static_destructors: what the streams hold is written, the exit code is kept, and
// nothing registered to run at exit runs (the point: LibTorch's static destructors are skipped).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "lib/core/process_exit.h"

namespace magic {
namespace {

struct ChildEnd {
  int code = -1;     // its exit code, -1 when it did not exit
  std::string text;  // what it wrote to `captured`
};

// Runs `body` in a forked child whose `captured` descriptor is a pipe, ending it with
// exit_without_static_destructors(code, leaks).
template <typename Body>
ChildEnd run_child(const Body& body, int captured, int code, LeakCheck leaks = LeakCheck::kRun) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) return {-1, "pipe failed"};
  const pid_t child = fork();
  if (child < 0) return {-1, "fork failed"};
  if (child == 0) {
    dup2(pipe_ends[1], captured);
    close(pipe_ends[0]);
    close(pipe_ends[1]);
    body();
    exit_without_static_destructors(code, leaks);
  }
  close(pipe_ends[1]);
  ChildEnd end;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_ends[0], buffer, sizeof(buffer))) > 0;)
    end.text.append(buffer, static_cast<size_t>(n));
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status)) end.code = WEXITSTATUS(status);
  return end;
}

TEST(ProcessExit, WritesWhatTheStreamsHoldKeepsTheCodeAndRunsNoExitHandler) {
  const ChildEnd end = run_child(
      [] {
        std::atexit([] { std::fputs(" at-exit", stdout); });
        std::cout << "buffered";         // no newline, no flush
        std::fputs(" c-stdio", stdout);  // a full buffer of its own, stdout being a pipe
      },
      STDOUT_FILENO, 3);
  EXPECT_EQ(end.code, 3);
  EXPECT_EQ(end.text, "buffered c-stdio");
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
  const ChildEnd leaked = run_child(leak, STDERR_FILENO, 0);
  EXPECT_NE(leaked.code, 0) << leaked.text;
  EXPECT_NE(leaked.text.find("LeakSanitizer: detected memory leaks"), std::string::npos) << leaked.text;
  EXPECT_NE(leaked.text.find("Direct leak of 28 byte(s)"), std::string::npos) << leaked.text;
  const ChildEnd skipped = run_child(leak, STDERR_FILENO, 0, LeakCheck::kSkipInForkedRank);
  EXPECT_EQ(skipped.code, 0) << skipped.text;
  const ChildEnd clean = run_child([] {}, STDERR_FILENO, 0);
  EXPECT_EQ(clean.code, 0) << clean.text;
#endif
}

}  // namespace
}  // namespace magic
