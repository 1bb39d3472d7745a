// A RapidCheck property run from a GoogleTest test that also counts the cases that ran to the
// end (not discarded, not shrinking) and asserts a minimum, so that a generator which quietly
// discards most of its draws cannot pass on a handful of cases. RC_PARAMS sets the case count
// (ctest: max_success=10) and with it the minimum; MAGIC_MIN_PROPERTY_CASES overrides the minimum.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdlib>
#include <string>

namespace magic::testing {

// MAGIC_MIN_PROPERTY_CASES, else the case count RC_PARAMS asks for (max_success=N), else 20.
inline int min_property_cases() {
  const char* v = std::getenv("MAGIC_MIN_PROPERTY_CASES");
  if (v != nullptr && *v != '\0') return std::atoi(v);
  const char* params = std::getenv("RC_PARAMS");
  const std::string text = params == nullptr ? "" : params;
  const size_t at = text.find("max_success=");
  return at == std::string::npos ? 20 : std::atoi(text.c_str() + at + std::string("max_success=").size());
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
