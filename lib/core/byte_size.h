// Sizes in bytes, read as a user writes them and written as the tools print them.
#pragma once

#include <cstdint>
#include <string>

namespace magic {

// "256MiB", "1.5 GiB", "4096" (bytes); binary units B, KiB, MiB, GiB, TiB. Anything else, a
// negative or non-finite number, or a size past 2^62 bytes is an InputError naming `what` and the text.
int64_t parse_byte_size(const std::string& text, const std::string& what);

// "512 B", "3.4 MiB", "24.0 GiB", "1.1 PiB"
std::string format_bytes(double bytes);

}  // namespace magic
