// The test entry point's promises (tests/main.cpp): a ctest entry whose filter matches no test
// fails instead of passing on nothing, and each test of a process starts in an empty folder of
// its own (ctest runs this suite in one process: cmake/suite_tests.cmake).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support.h"

namespace magic {
namespace {

TEST(TestMain, AFilterThatMatchesNoTestFailsNamingIt) {
  const auto o =
      testing::run_command("/proc/" + std::to_string(getpid()) + "/exe --gtest_filter=NoSuchSuiteAnywhere.* 2>&1");
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("tests: no test matches the filter NoSuchSuiteAnywhere.*"), std::string::npos) << o.output;
}

// One pattern of several that matches nothing (a suite of quick_suites that went away) fails the
// run too, naming the pattern, though the others ran and passed.
TEST(TestMain, APatternThatMatchesNoTestFailsNamingItBesideOnesThatDo) {
  const auto o = testing::run_command("/proc/" + std::to_string(getpid()) +
                                      "/exe --gtest_filter=TestMain.ATestWrites*:NoSuchSuiteAnywhere.* 2>&1");
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("[  PASSED  ] 1 test."), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("tests: no test matches NoSuchSuiteAnywhere.* of the filter"), std::string::npos) << o.output;
  const auto all_found = testing::run_command("/proc/" + std::to_string(getpid()) +
                                              "/exe --gtest_filter=TestMain.ATestWrites*:T?stMain.TheNext* 2>&1");
  EXPECT_EQ(all_found.exit_code, 0) << all_found.output;
}

// The two tests below run in this order in one process: the second must not see the first's file.
TEST(TestMain, ATestWritesAFileInItsFolder) {
  std::ofstream(::testing::TempDir() + "/left-by-the-first-test") << "x";
  EXPECT_TRUE(std::filesystem::exists(::testing::TempDir() + "/left-by-the-first-test"));
}

TEST(TestMain, TheNextTestStartsInAnEmptyFolderOfItsOwn) {
  EXPECT_TRUE(std::filesystem::is_empty(::testing::TempDir())) << ::testing::TempDir();
  EXPECT_EQ(std::string(std::getenv("TMPDIR")) + "/", ::testing::TempDir());
}

}  // namespace
}  // namespace magic
