// The ranks a layout's sizes make, bounded before anything multiplies them: c10d numbers ranks with
// an int, so no world passes 2^31 - 1, and sizes a user typed can overflow int64 when multiplied
// (the topology fuzzer's "enc=tp999999992,dp22147483648"; docs/limits.md).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace magic::dist {

inline constexpr int64_t kMaxWorldSize = 2147483647;

// Π sizes, or nullopt past kMaxWorldSize (each size >= 1).
inline std::optional<int64_t> bounded_product(std::initializer_list<int64_t> sizes) {
  int64_t product = 1;
  for (const int64_t size : sizes) {
    if (size > kMaxWorldSize / product) return std::nullopt;
    product *= size;
  }
  return product;
}

// Σ terms, or nullopt past kMaxWorldSize (each term >= 0 and at most kMaxWorldSize).
inline std::optional<int64_t> bounded_sum(std::initializer_list<std::optional<int64_t>> terms) {
  int64_t sum = 0;
  for (const std::optional<int64_t>& term : terms) {
    if (!term || *term > kMaxWorldSize - sum) return std::nullopt;
    sum += *term;
  }
  return sum;
}

}  // namespace magic::dist
