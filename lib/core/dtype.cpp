#include "lib/core/dtype.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

c10::ScalarType parse_dtype(const std::string& name, const std::string& what) {
  if (name == "fp64" || name == "float64") return c10::kDouble;
  if (name == "fp32" || name == "float32") return c10::kFloat;
  if (name == "bf16" || name == "bfloat16") return c10::kBFloat16;
  if (name == "fp16" || name == "float16") return c10::kHalf;
  throw InputError(str_cat(what, ": unknown dtype '", name, "'; expected one of fp64, fp32, bf16, fp16"));
}

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kDouble:
      return "fp64";
    case c10::kFloat:
      return "fp32";
    case c10::kBFloat16:
      return "bf16";
    case c10::kHalf:
      return "fp16";
    default:
      return c10::toString(dtype);
  }
}

}  // namespace magic
