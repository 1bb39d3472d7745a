// Runtime::keep_connections_until_exit: a rank process about to end leaves its groups' connections
// to the kernel instead of closing each through its Gloo event loop. The groups outlive the
// Runtime and their connections still work; without the call they are gone with it.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "lib/distributed/runtime/runtime.h"

namespace magic {
namespace {

// Each rank's world and "pair" groups as weak pointers, after its Runtime is destroyed.
std::vector<std::weak_ptr<dist::Group>> groups_after_runtime(bool keep) {
  std::mutex mutex;
  std::vector<std::weak_ptr<dist::Group>> groups(4);
  dist::run_ranks_in_threads(2, [&](dist::Runtime& rt) {
    const auto pair = rt.shared_group("pair", {0, 1});
    std::lock_guard<std::mutex> lock(mutex);
    groups[2 * rt.rank()] = rt.world();
    groups[2 * rt.rank() + 1] = pair;
    if (keep) rt.keep_connections_until_exit();
  });
  return groups;
}

TEST(RuntimeExit, KeptGroupsOutliveTheRuntimeWithWorkingConnections) {
  const auto kept = groups_after_runtime(/*keep=*/true);
  for (const auto& g : kept) ASSERT_NE(g.lock(), nullptr);
  // Both ranks' "pair" groups still sum across their connection.
  std::vector<at::Tensor> sums(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] { sums[r] = kept[2 * r + 1].lock()->sum(at::full({3}, r + 1.0, at::kDouble)); });
  }
  for (auto& t : ranks) t.join();
  for (const auto& s : sums) EXPECT_TRUE(at::equal(s, at::full({3}, 3.0, at::kDouble))) << s;
}

TEST(RuntimeExit, WithoutTheCallTheGroupsAreGoneWithTheRuntime) {
  for (const auto& g : groups_after_runtime(/*keep=*/false)) EXPECT_EQ(g.lock(), nullptr);
}

}  // namespace
}  // namespace magic
