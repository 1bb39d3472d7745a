// The C allocator, set up for LibTorch on the CPU. glibc serves blocks above its mmap threshold
// (128 KiB at first) with fresh mmap()s and returns them with munmap(), and trims the heap top
// back to the system: a training step's activations (megabytes each, freed and reallocated every
// step) then cost a page fault per 4 KiB on every use. On the demo this tripled a one-thread run
// (system time 14.6 s of 64 s). Keeping freed memory in the process removes that; peak RSS is
// unchanged (the same blocks are reused).
#pragma once

namespace magic {

// Call first in main(): mmap only above 32 MiB (glibc's largest threshold), never trim the heap.
void keep_freed_memory_in_process();

}  // namespace magic
