#include "lib/core/allocator.h"

#include <malloc.h>

namespace magic {

void keep_freed_memory_in_process() {
  // The largest mmap threshold glibc accepts on 64-bit: HEAP_MAX_SIZE / 2 = 32 MiB.
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, -1);  // -1: trimming off (the value is read as unsigned: the largest)
}

}  // namespace magic
