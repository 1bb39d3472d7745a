#include "lib/core/caching_cpu_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>

namespace magic {
namespace {

constexpr size_t kPage = 4096;

struct Block {
  size_t size;
  CachingCpuAllocator* owner;
};

// Every mapped block, by its address, and one lock for them and every allocator's cache. Never
// destroyed: tensors may be freed during static destruction.
std::mutex& blocks_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<void*, Block>& blocks() {
  static auto* b = new std::unordered_map<void*, Block>;
  return *b;
}

CachingCpuAllocator* installed = nullptr;
std::once_flag install_once;

}  // namespace

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
void CachingCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}
#endif

c10::DataPtr CachingCpuAllocator::take(size_t n) {
  if (n < min_bytes_) return fallback_->allocate(n);
  const size_t size = (n + kPage - 1) / kPage * kPage;
  void* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(blocks_mutex());
    std::vector<void*>& cached = free_[size];
    if (!cached.empty()) {
      data = cached.back();
      cached.pop_back();
      ++stats_.reuses;
    }
  }
  const bool fresh = data == nullptr;
  if (fresh) {
    data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) throw std::bad_alloc();
  }
  std::lock_guard<std::mutex> lock(blocks_mutex());
  if (fresh) {
    blocks().emplace(data, Block{size, this});
    stats_.bytes_mapped += static_cast<int64_t>(size);
  }
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return {data, data, &CachingCpuAllocator::give_back, c10::Device(c10::DeviceType::CPU)};
}

void CachingCpuAllocator::give_back(void* data) {
  {
    std::lock_guard<std::mutex> lock(blocks_mutex());
    const auto it = blocks().find(data);
    if (it != blocks().end()) {
      CachingCpuAllocator& owner = *it->second.owner;
      owner.free_[it->second.size].push_back(data);
      owner.stats_.bytes_in_use -= static_cast<int64_t>(it->second.size);
      return;
    }
  }
  c10::free_cpu(data);  // a small block from LibTorch's allocator, freed through the raw interface
}

CachingCpuAllocatorStats CachingCpuAllocator::stats() const {
  std::lock_guard<std::mutex> lock(blocks_mutex());
  return stats_;
}

void install_caching_cpu_allocator() {
  std::call_once(install_once, [] {
    installed = new CachingCpuAllocator(c10::GetCPUAllocator(), 64 * 1024);  // never destroyed
    c10::SetCPUAllocator(installed, /*priority=*/1);
  });
}

CachingCpuAllocatorStats caching_cpu_allocator_stats() {
  return installed != nullptr ? installed->stats() : CachingCpuAllocatorStats{};
}

}  // namespace magic
