// A size in bytes as a user writes it: "256MiB", "1.5 GiB", "4096" (bytes); binary units B, KiB,
// MiB, GiB, TiB. Anything else, a negative or non-finite number, or a size past 2^62 bytes is an
// InputError naming `what` and the text.
#pragma once

#include <cstdint>
#include <string>

namespace magic {

int64_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace magic
