// The test binary's entry point. ctest runs tests two at a time on two cores, so each process
// uses one intra-op thread.
//
// Every file a test writes goes under one directory of its own: this process makes it (unique
// per process, and ctest runs one test a process) and points TMPDIR and TEST_TMPDIR at it, so
// ::testing::TempDir(), the launcher's rank logs and every tool a test starts write there. It is
// removed when every test passed and kept, with its path printed, when one failed.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "lib/core/allocator.h"

namespace {

std::string make_test_directory() {
  const char* parent = std::getenv("TMPDIR");
  std::string pattern = std::string(parent != nullptr && parent[0] != '\0' ? parent : "/tmp") + "/magic-test-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    std::cerr << "tests: cannot create a temporary directory from " << pattern << "\n";
    std::exit(2);
  }
  return buffer.data();
}

}  // namespace

int main(int argc, char** argv) {
  magic::keep_freed_memory_in_process();  // lib/core/allocator.h
  at::set_num_threads(1);
  const std::string dir = make_test_directory();
  setenv("TMPDIR", dir.c_str(), 1);
  setenv("TEST_TMPDIR", dir.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  if (result == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  } else {
    std::cerr << "tests: files of the failed run kept in " << dir << "\n";
  }
  return result;
}
