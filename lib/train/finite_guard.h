// Stops a run at the first value that is not finite, naming where it appeared: a training step's
// gradient or updated parameters, the query loss or its gradient, a REPLAY step's cotangent, the
// scores. A diverged run must not write NaN scores as if they were a result (magic-run exits 1).
#pragma once

#include <stdexcept>
#include <string>

#include "lib/core/tensor_tree.h"

namespace magic {

class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws NonFiniteError "<where>: <name> is not finite (NaN at [i, j] of [n, m], ...)" for the first
// entry of `tree` holding a NaN or an infinity.
void require_finite(const TensorTree& tree, const std::string& where);
void require_finite(const at::Tensor& tensor, const std::string& name, const std::string& where);

}  // namespace magic
