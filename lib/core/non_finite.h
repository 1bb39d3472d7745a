// Where a tensor holds a NaN or an infinity, in words: one text for the guard that stops a
// diverged run (lib/train/finite_guard.h) and for the check rows of a non-finite result
// (lib/compare/finite_rows.h), so both name the entry the same way.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace magic {

// "NaN at [1, 0] of [2, 3]; 2 of 6 entries" (or "an infinity at ..."), for the first entry of
// `tensor` that is not finite; nullopt when every entry is finite or the tensor holds no floats.
std::optional<std::string> describe_non_finite(const at::Tensor& tensor);

}  // namespace magic
