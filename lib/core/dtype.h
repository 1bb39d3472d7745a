// Floating dtypes by their user-facing names ("fp64", "fp32", "bf16", "fp16").
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace magic {

// Throws InputError naming `what` and the accepted names.
c10::ScalarType parse_dtype(const std::string& name, const std::string& what = "dtype");
std::string dtype_name(c10::ScalarType dtype);

}  // namespace magic
