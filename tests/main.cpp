// The test binary's entry point. ctest runs tests two at a time on two cores, so each process
// uses one intra-op thread.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
