// A CPU allocator for LibTorch that keeps freed large blocks by size and hands them back for the
// next request of that size, instead of returning them to malloc's heap.
//
// Why: REPLAY allocates the same few block sizes every step (activations, score-sized attention
// tensors, state entries), from one thread or, pipelined (replay_pipeline.h), from two at once
// with different lifetimes. In malloc's heap freed blocks are merged and split for other sizes,
// and with trimming off (allocator.h) the heap's high-water mark outgrows the bytes in use
// (replay_bench, N = 64: 235 MiB at most in use against a 302 MiB heap on one thread; 315 against
// 452 pipelined on two). A block kept whole for its own size is never split, so what is held is
// the most blocks of each size alive at once; and a block is mapped once, so it page-faults once.
//
// Blocks below `min_bytes` go to the allocator it replaces (small and many: malloc serves them
// well). Cached blocks are kept until the process ends: right for magic-run, whose shapes repeat
// every step (every batch is padded to max_len); a process whose tensor sizes kept changing would
// hold a high-water mark for each size.
#pragma once

#include <c10/core/Allocator.h>
#include <torch/csrc/api/include/torch/version.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace magic {

struct CachingCpuAllocatorStats {
  int64_t bytes_mapped = 0;  // every block mapped so far (all still held: in use or cached)
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t reuses = 0;  // requests served from the cache
};

class CachingCpuAllocator final : public c10::Allocator {
 public:
  CachingCpuAllocator(c10::Allocator* fallback, size_t min_bytes) : fallback_(fallback), min_bytes_(min_bytes) {}
  // Blocks still cached are not unmapped: tensors may outlive an allocator (the installed one is
  // never destroyed); a test's own allocator must outlive its tensors.
  ~CachingCpuAllocator() override = default;

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
    return take(n);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override;
#else
  c10::DataPtr allocate(size_t n) const override {
    return const_cast<CachingCpuAllocator*>(this)->take(n);
  }
#endif
  // Frees what allocate gave (the raw interface: context and data are the same pointer).
  c10::DeleterFnPtr raw_deleter() const override {
    return &give_back;
  }

  CachingCpuAllocatorStats stats() const;

 private:
  c10::DataPtr take(size_t n);
  static void give_back(void* data);

  c10::Allocator* fallback_;
  size_t min_bytes_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // cached blocks by size (whole pages)
  CachingCpuAllocatorStats stats_;
};

// Makes a CachingCpuAllocator (blocks of 64 KiB and more) LibTorch's CPU allocator for the rest
// of the process; idempotent. Tensors allocated before keep their own deleter.
void install_caching_cpu_allocator();
// The installed allocator's figures; zeros when none is installed.
CachingCpuAllocatorStats caching_cpu_allocator_stats();

}  // namespace magic
