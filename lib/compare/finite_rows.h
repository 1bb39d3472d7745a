// A row whose tensors are not all finite cannot be judged by its statistics: NaN compares false
// with every bound, and a cosine of NaN reads like a direction that differs. Such a row fails and
// says which tensor is not finite and where, in the words of lib/core/non_finite.h.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace magic {

// A row that concatenates the flattened tensors of every step (the grad rows) gives the shape of
// one step's tensor, so that an entry is named by its step and its index there; empty: the row
// is one tensor of its own shape.
using StepShape = std::vector<int64_t>;

// "distributed tensor is not finite (NaN at [3, 0] of [257, 16]; 12 of 4112 entries)"; with a step
// shape "... is not finite at step 2 (...), also at steps 3, 4"; nullopt when every entry is finite.
std::optional<std::string> non_finite_text(const std::string& what, const at::Tensor& tensor,
                                           const StepShape& step_shape = {});

// The text of each named tensor that is not finite, joined by "; "; nullopt when all are finite.
std::optional<std::string> non_finite_diagnosis(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                                const StepShape& step_shape = {});

}  // namespace magic
