// The counted-property harness fails when too few valid cases ran, and when RapidCheck gives up
// on a generator that discards nearly everything: a property cannot pass on a handful of cases.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/properties/counted_property.h"

namespace magic {
namespace {

class MinimumCases {
 public:
  explicit MinimumCases(const char* value) {
    const char* old = std::getenv("MAGIC_MIN_PROPERTY_CASES");
    had_ = old != nullptr;
    if (had_) saved_ = old;
    setenv("MAGIC_MIN_PROPERTY_CASES", value, 1);
  }
  ~MinimumCases() {
    if (had_) {
      setenv("MAGIC_MIN_PROPERTY_CASES", saved_.c_str(), 1);
    } else {
      unsetenv("MAGIC_MIN_PROPERTY_CASES");
    }
  }

 private:
  bool had_ = false;
  std::string saved_;
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
  const char* rc = std::getenv("RC_PARAMS");
  const std::string saved = rc == nullptr ? "" : rc;
  const char* minimum = std::getenv("MAGIC_MIN_PROPERTY_CASES");
  const std::string saved_minimum = minimum == nullptr ? "" : minimum;
  unsetenv("MAGIC_MIN_PROPERTY_CASES");
  setenv("RC_PARAMS", "seed=3 max_success=37", 1);
  EXPECT_EQ(testing::min_property_cases(), 37);
  setenv("RC_PARAMS", "seed=3", 1);
  EXPECT_EQ(testing::min_property_cases(), 20);
  {
    MinimumCases five("5");
    EXPECT_EQ(testing::min_property_cases(), 5);
  }
  if (rc == nullptr) {
    unsetenv("RC_PARAMS");
  } else {
    setenv("RC_PARAMS", saved.c_str(), 1);
  }
  if (minimum != nullptr) setenv("MAGIC_MIN_PROPERTY_CASES", saved_minimum.c_str(), 1);
}

TEST(CountedProperty, CountsEveryCaseThatRan) {
  MinimumCases one("1");
  EXPECT_GE(testing::check_counted("trivial", [] {}), 1);
}

}  // namespace
}  // namespace magic
