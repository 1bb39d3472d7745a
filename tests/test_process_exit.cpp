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

}  // namespace
}  // namespace magic
