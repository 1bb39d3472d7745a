#include "lib/step/prefix_encoder.h"

#include <stdexcept>

#include "lib/core/strings.h"

namespace magic {

at::Tensor prefix_columns(const at::Tensor& columns, int64_t length) {
  const at::Tensor below = columns.lt(length);
  const int64_t k = below.sum().item<int64_t>();
  // The columns of a zig-zag chunk pair ascend (chunk c, then chunk 2cp-1-c), so those below P
  // are a leading run; anything else would put a prefix embedding on a text column.
  if (!below.narrow(0, 0, k).all().item<bool>()) {
    throw std::logic_error(str_cat("prefix_columns: the positions below ", length, " are not the leading columns"));
  }
  return columns.narrow(0, 0, k);
}

}  // namespace magic
