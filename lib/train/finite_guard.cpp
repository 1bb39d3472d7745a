#include "lib/train/finite_guard.h"

#include <cmath>
#include <vector>

#include "lib/core/strings.h"

namespace magic {

void require_finite(const at::Tensor& tensor, const std::string& name, const std::string& where) {
  if (!tensor.defined() || !tensor.is_floating_point()) return;
  const at::Tensor bad = tensor.detach().isfinite().logical_not();
  if (!bad.any().item<bool>()) return;
  const at::Tensor flat = tensor.detach().reshape({-1});
  const int64_t first = bad.reshape({-1}).nonzero()[0][0].item<int64_t>();
  const double value = flat[first].item<double>();
  std::vector<int64_t> index(static_cast<size_t>(tensor.dim()));
  int64_t rest = first;
  for (int64_t d = tensor.dim() - 1; d >= 0; --d) {
    index[d] = rest % tensor.size(d);
    rest /= tensor.size(d);
  }
  throw NonFiniteError(str_cat(where, ": ", name, " is not finite (", std::isnan(value) ? "NaN" : "an infinity", " at ",
                               c10::IntArrayRef(index), " of ", tensor.sizes(), "; ", bad.sum().item<int64_t>(), " of ",
                               tensor.numel(), " entries)"));
}

void require_finite(const TensorTree& tree, const std::string& where) {
  for (const auto& e : tree) require_finite(e.tensor, e.name, where);
}

}  // namespace magic
