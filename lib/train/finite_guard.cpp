#include "lib/train/finite_guard.h"

#include "lib/core/non_finite.h"
#include "lib/core/strings.h"

namespace magic {

void require_finite(const at::Tensor& tensor, const std::string& name, const std::string& where) {
  if (const auto where_bad = describe_non_finite(tensor)) {
    throw NonFiniteError(str_cat(where, ": ", name, " is not finite (", *where_bad, ")"));
  }
}

void require_finite(const TensorTree& tree, const std::string& where) {
  for (const auto& e : tree) require_finite(e.tensor, e.name, where);
}

}  // namespace magic
