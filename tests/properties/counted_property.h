// A RapidCheck property run from a GoogleTest test that also counts the cases that ran to the
// end (not discarded, not shrinking) and asserts a minimum, so that a generator which quietly
// discards most of its draws cannot pass on a handful of cases. RC_PARAMS sets the case count
// (ctest: max_success=20); MAGIC_MIN_PROPERTY_CASES sets the minimum (default 20).
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdlib>
#include <string>

namespace magic::testing {

inline int min_property_cases() {
  const char* v = std::getenv("MAGIC_MIN_PROPERTY_CASES");
  return v != nullptr && *v != '\0' ? std::atoi(v) : 20;
}

// Checks `property` (a callable using *gen inside, as in RC_GTEST_PROP); returns the count.
template <typename Property>
int check_counted(const std::string& description, Property property) {
  int completed = 0;
  const bool passed = rc::check(description, [&] {
    property();
    ++completed;  // reached only by a case that was not discarded and did not fail
  });
  EXPECT_TRUE(passed) << description;
  if (passed) {
    EXPECT_GE(completed, min_property_cases()) << description << ": only " << completed << " valid cases ran";
  }
  std::cout << description << ": " << completed << " valid cases ran\n";
  return completed;
}

}  // namespace magic::testing
