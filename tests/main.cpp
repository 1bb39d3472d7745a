// The test binary's entry point. ctest runs tests two at a time on two cores, so each process
// uses one intra-op thread.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "lib/core/allocator.h"

int main(int argc, char** argv) {
  magic::keep_freed_memory_in_process();  // lib/core/allocator.h
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
