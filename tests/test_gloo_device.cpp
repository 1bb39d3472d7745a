// The Gloo device (a socket event loop and its thread) that a process's groups share
// (group.cpp): the groups of rank threads sum through it; it ends with the last group, leaving no
// thread behind; and a child forked while a device is alive makes its own rather than wait on the
// parent's loop thread, which the child does not have.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "lib/distributed/runtime/runtime.h"

namespace magic {
namespace {

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Three rank threads, each in the world and in a pair group: every sum right.
bool sums_right() {
  std::mutex mutex;
  bool right = true;
  dist::run_ranks_in_threads(3, [&](dist::Runtime& rt) {
    const at::Tensor world = rt.world()->sum(at::full({2}, rt.rank() + 1.0, at::kDouble));
    const auto pair = rt.shared_group("first two", {0, 1});
    const at::Tensor two = rt.rank() < 2 ? pair->sum(at::full({2}, 1.0, at::kDouble)) : at::full({2}, 2.0, at::kDouble);
    std::lock_guard<std::mutex> lock(mutex);
    right =
        right && at::equal(world, at::full({2}, 6.0, at::kDouble)) && at::equal(two, at::full({2}, 2.0, at::kDouble));
  });
  return right;
}

TEST(GlooDevice, GroupsSumThroughItAndItEndsWithTheLastGroup) {
  const size_t before = thread_count();
  EXPECT_TRUE(sums_right());
  EXPECT_EQ(thread_count(), before) << "a thread outlived the groups";
}

TEST(GlooDevice, AChildForkedWhileItIsAliveMakesItsOwn) {
  std::mutex mutex;
  int status = -1;
  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    rt.world()->sum(at::ones({1}, at::kDouble));  // the device is alive in this process
    if (rt.rank() != 0) return;
    const pid_t child = fork();
    if (child == 0) {
      alarm(20);  // waiting on the parent's loop thread would hang: SIGALRM ends it
      std::_Exit(sums_right() ? 0 : 1);
    }
    int s = 0;
    waitpid(child, &s, 0);
    std::lock_guard<std::mutex> lock(mutex);
    status = s;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace magic
