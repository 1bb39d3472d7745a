// The counted-property harness fails when too few valid cases ran, and when RapidCheck gives up
// on a generator that discards nearly everything: a property cannot pass on a handful of cases.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>

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

TEST(CountedProperty, CountsEveryCaseThatRan) {
  MinimumCases one("1");
  EXPECT_GE(testing::check_counted("trivial", [] {}), 1);
}

}  // namespace
}  // namespace magic
