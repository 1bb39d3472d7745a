#include "lib/io/atomic_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string temp = path + ".partial";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(str_cat(path, ": cannot open for writing"));
    write(out);
    if (!out) {
      out.close();
      std::remove(temp.c_str());
      throw InputError(str_cat(path, ": write failed"));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    throw InputError(str_cat(path, ": cannot rename into place (", ec.message(), ")"));
  }
}

void write_file_atomically(const std::string& path, const std::string& content) {
  write_file_atomically(
      path, [&](std::ostream& out) { out.write(content.data(), static_cast<std::streamsize>(content.size())); });
}

}  // namespace magic
