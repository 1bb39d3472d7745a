#include "lib/core/non_finite.h"

#include <cmath>
#include <vector>

#include "lib/core/strings.h"

namespace magic {

std::optional<std::string> describe_non_finite(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_floating_point()) return std::nullopt;
  const at::Tensor bad = tensor.detach().isfinite().logical_not();
  if (!bad.any().item<bool>()) return std::nullopt;
  const at::Tensor flat = tensor.detach().reshape({-1});
  const int64_t first = bad.reshape({-1}).nonzero()[0][0].item<int64_t>();
  const double value = flat[first].item<double>();
  std::vector<int64_t> index(static_cast<size_t>(tensor.dim()));
  int64_t rest = first;
  for (int64_t d = tensor.dim() - 1; d >= 0; --d) {
    index[d] = rest % tensor.size(d);
    rest /= tensor.size(d);
  }
  return str_cat(std::isnan(value) ? "NaN" : "an infinity", " at ", c10::IntArrayRef(index), " of ", tensor.sizes(),
                 "; ", bad.sum().item<int64_t>(), " of ", tensor.numel(), " entries");
}

}  // namespace magic
