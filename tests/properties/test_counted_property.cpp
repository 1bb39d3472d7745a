// The counted-property harness fails when too few valid cases ran, and when RapidCheck gives up
// on a generator that discards nearly everything: a property cannot pass on a handful of cases.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/properties/counted_property.h"

namespace magic {
namespace {

// Sets (or, given nullptr, unsets) an environment variable for a scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) saved_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), saved_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  bool had_ = false;
  std::string saved_;
};

struct MinimumCases : ScopedEnv {
  explicit MinimumCases(const char* value) : ScopedEnv("MAGIC_MIN_PROPERTY_CASES", value) {}
};

TEST(CountedProperty, FailsWhenFewerValidCasesRanThanTheMinimum) {
  MinimumCases many("100000");  // more than any RC_PARAMS here runs
  EXPECT_NONFATAL_FAILURE(testing::check_counted("trivial", [] {}), "valid cases ran");
}

TEST(CountedProperty, FailsWhenTheGeneratorDiscardsEverything) {
  EXPECT_NONFATAL_FAILURE(testing::check_counted("discards", [] { RC_PRE(false); }), "discards");
}

// ctest sets RC_PARAMS alone (tests/CMakeLists.txt): the minimum is the count it asks for.
TEST(CountedProperty, TheMinimumIsTheCaseCountRcParamsAsksFor) {
  MinimumCases unset(nullptr);
  {
    ScopedEnv rc("RC_PARAMS", "seed=3 max_success=37");
    EXPECT_EQ(testing::min_property_cases(), 37);
  }
  {
    ScopedEnv rc("RC_PARAMS", "seed=3");
    EXPECT_EQ(testing::min_property_cases(), 20);
    MinimumCases five("5");
    EXPECT_EQ(testing::min_property_cases(), 5);
  }
}

TEST(CountedProperty, CountsEveryCaseThatRan) {
  MinimumCases one("1");
  EXPECT_GE(testing::check_counted("trivial", [] {}), 1);
}

}  // namespace
}  // namespace magic
