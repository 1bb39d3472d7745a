// CachingCpuAllocator (lib/core/caching_cpu_allocator.h): a freed block of a size is the next
// block handed out for that size, from any thread; other sizes get blocks of their own; small
// requests go to the allocator it replaces; the raw interface frees both kinds; and installed, it
// serves LibTorch's CPU tensors. The test's allocators are never installed (the process keeps its
// own), except in a child process.
#include <gtest/gtest.h>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <cstdlib>
#include <thread>

#include "lib/core/caching_cpu_allocator.h"

namespace magic {
namespace {

constexpr size_t kMin = 64 * 1024;

TEST(CachingCpuAllocator, AFreedBlockServesTheNextRequestOfItsSize) {
  static CachingCpuAllocator cache(c10::GetDefaultCPUAllocator(), kMin);  // outlives its blocks
  void* first = nullptr;
  {
    c10::DataPtr a = cache.allocate(100000);
    first = a.get();
    static_cast<char*>(first)[99999] = 1;           // the whole request is writable
    EXPECT_EQ(cache.stats().bytes_in_use, 102400);  // 100000 rounded up to whole 4 KiB pages
  }
  EXPECT_EQ(cache.stats().bytes_in_use, 0);
  c10::DataPtr again = cache.allocate(100000);
  EXPECT_EQ(again.get(), first);
  c10::DataPtr other = cache.allocate(200000);  // another size: a block of its own
  EXPECT_NE(other.get(), first);
  const CachingCpuAllocatorStats s = cache.stats();
  EXPECT_EQ(s.reuses, 1);
  EXPECT_EQ(s.bytes_mapped, 102400 + 200704);
  EXPECT_EQ(s.bytes_in_use, 102400 + 200704);
  EXPECT_EQ(s.peak_bytes_in_use, 102400 + 200704);
}

TEST(CachingCpuAllocator, ABlockFreedOnAnotherThreadReturnsToTheCache) {
  static CachingCpuAllocator cache(c10::GetDefaultCPUAllocator(), kMin);
  c10::DataPtr a = cache.allocate(kMin);
  void* block = a.get();
  std::thread([moved = std::move(a)]() mutable { moved.clear(); }).join();
  EXPECT_EQ(cache.stats().bytes_in_use, 0);
  c10::DataPtr b = cache.allocate(kMin);
  EXPECT_EQ(b.get(), block);
  EXPECT_EQ(cache.stats().bytes_mapped, static_cast<int64_t>(kMin));
}

TEST(CachingCpuAllocator, SmallRequestsGoToTheAllocatorItReplaces) {
  static CachingCpuAllocator cache(c10::GetDefaultCPUAllocator(), kMin);
  { c10::DataPtr small = cache.allocate(kMin - 1); }
  const CachingCpuAllocatorStats s = cache.stats();
  EXPECT_EQ(s.bytes_mapped, 0);
  EXPECT_EQ(s.peak_bytes_in_use, 0);
}

TEST(CachingCpuAllocator, TheRawInterfaceFreesBothKinds) {
  static CachingCpuAllocator cache(c10::GetDefaultCPUAllocator(), kMin);
  void* large = cache.raw_allocate(kMin);
  void* small = cache.raw_allocate(64);
  EXPECT_EQ(cache.stats().bytes_in_use, static_cast<int64_t>(kMin));
  cache.raw_deallocate(large);
  cache.raw_deallocate(small);  // through LibTorch's own free
  EXPECT_EQ(cache.stats().bytes_in_use, 0);
  EXPECT_EQ(cache.raw_allocate(kMin), large);
}

// In a child process: installed, it holds LibTorch's CPU tensors of 64 KiB and more, and the
// values computed in them are those of the default allocator.
TEST(CachingCpuAllocatorDeathTest, InstalledItServesCpuTensors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const at::Tensor x = torch::arange(20000, torch::kFloat64);  // 160000 bytes
  const double expected = (x * x).sum().item<double>();
  EXPECT_EXIT(
      {
        install_caching_cpu_allocator();
        install_caching_cpu_allocator();  // idempotent
        const at::Tensor y = torch::arange(20000, torch::kFloat64);
        const bool held = caching_cpu_allocator_stats().bytes_in_use >= 160000;
        const bool same = (y * y).sum().item<double>() == expected;
        std::exit(held && same ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace magic
