// The test binary's entry point. ctest runs tests two at a time on two cores, so each process
// uses one intra-op thread.
//
// Every file a test writes goes under one directory of its own: this process makes one (unique
// per process) and, for each test, a folder in it, and points TMPDIR and TEST_TMPDIR at that
// folder, so ::testing::TempDir(), the launcher's rank logs and every tool a test starts write
// there; a test finds no file an earlier test of the same process left (ctest runs a cheap suite
// in one process: cmake/suite_tests.cmake). The directory is removed when every test passed and
// kept, with its path printed, when one failed. A filter with a positive pattern that matches no
// test fails the run (ctest's quick_suites entry names a hundred suites; one that went away is
// named).
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
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

// Before each test: TMPDIR and TEST_TMPDIR name a new folder of the process's directory.
class FolderPerTest : public ::testing::EmptyTestEventListener {
 public:
  explicit FolderPerTest(std::string root) : root_(std::move(root)) {}
  void OnTestStart(const ::testing::TestInfo&) override {
    const std::string folder = root_ + "/" + std::to_string(++started_);
    std::filesystem::create_directory(folder);
    setenv("TMPDIR", folder.c_str(), 1);
    setenv("TEST_TMPDIR", folder.c_str(), 1);
  }

 private:
  std::string root_;
  int started_ = 0;
};

// gtest's wildcards: '*' any string, '?' one character.
bool matches(const char* pattern, const char* name) {
  if (*pattern == '\0') return *name == '\0';
  if (*pattern == '*') return matches(pattern + 1, name) || (*name != '\0' && matches(pattern, name + 1));
  return *name != '\0' && (*pattern == '?' || *pattern == *name) && matches(pattern + 1, name + 1);
}

// The positive patterns of the filter (before any '-') that match no test of this program.
std::vector<std::string> unmatched_patterns(const std::string& filter) {
  std::vector<std::string> unmatched;
  const std::string positive = filter.substr(0, filter.find('-'));
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  size_t start = 0;
  while (start <= positive.size()) {
    const size_t end = std::min(positive.find(':', start), positive.size());
    const std::string pattern = positive.substr(start, end - start);
    start = end + 1;
    if (pattern.empty() || pattern == "*") continue;
    bool found = false;
    for (int i = 0; i < unit.total_test_suite_count() && !found; ++i) {
      const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
      for (int j = 0; j < suite.total_test_count() && !found; ++j) {
        const std::string full = std::string(suite.name()) + "." + suite.GetTestInfo(j)->name();
        found = matches(pattern.c_str(), full.c_str());
      }
    }
    if (!found) unmatched.push_back(pattern);
  }
  return unmatched;
}

}  // namespace

int main(int argc, char** argv) {
  magic::keep_freed_memory_in_process();  // lib/core/allocator.h
  at::set_num_threads(1);
  const std::string dir = make_test_directory();
  setenv("TMPDIR", dir.c_str(), 1);
  setenv("TEST_TMPDIR", dir.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new FolderPerTest(dir));
  const std::vector<std::string> unmatched = unmatched_patterns(GTEST_FLAG_GET(filter));
  const int result = RUN_ALL_TESTS();
  const bool none_ran = !GTEST_FLAG_GET(list_tests) && ::testing::UnitTest::GetInstance()->test_to_run_count() == 0;
  if (result == 0 || none_ran) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  } else {
    std::cerr << "tests: files of the failed run kept in " << dir << "\n";
  }
  if (none_ran) {
    std::cerr << "tests: no test matches the filter " << GTEST_FLAG_GET(filter) << "\n";
    return 1;
  }
  for (const std::string& pattern : unmatched) std::cerr << "tests: no test matches " << pattern << " of the filter\n";
  return unmatched.empty() ? result : 1;
}
