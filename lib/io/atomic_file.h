// Writes a whole file through a temporary name and a rename, so a failed or interrupted write
// never leaves a half-written file behind.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace magic {

// `write` fills the stream; throws InputError naming the path when it cannot be written.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace magic
