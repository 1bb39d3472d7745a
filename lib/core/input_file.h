// Reading a file someone else wrote: it must be a regular file (a device such as /dev/zero, a pipe
// or a folder is refused by name before a byte is read) no larger than its format's bound
// (input_limits.h), and a line longer than the bound is refused where it starts, not grown.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

namespace magic {

// InputError "PATH: is a device, expected a WHAT" (or cannot open WHAT) unless `path` names a
// regular file (after symlinks). `what` reads after "a": "JSON file", "data file".
void require_regular_file(const std::string& path, const std::string& what);

// The whole file; InputError naming it where it is no regular file, cannot be opened or read, or
// holds more than `max_bytes`.
std::string read_input_file(const std::string& path, const std::string& what, int64_t max_bytes);

// The next line of `in` into `line` (without its '\n'); false at the end. InputError naming
// `where` and `line_number` where the line runs past `max_bytes`.
bool read_bounded_line(std::istream& in, std::string& line, int64_t max_bytes, const std::string& where,
                       int64_t line_number);

}  // namespace magic
