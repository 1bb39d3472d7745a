#include "lib/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {
namespace {

// fsync through a fresh descriptor: std::ofstream does not expose its own. Linux allows fsync on
// a read-only descriptor; it flushes the file's data, whoever wrote it.
bool sync_to_disk(const std::string& file) {
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = fsync(fd) == 0;
  return close(fd) == 0 && ok;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string temp = str_cat(path, ".partial.", getpid());
  auto fail = [&](const std::string& what) {
    std::remove(temp.c_str());
    throw InputError(str_cat(path, ": ", what));
  };
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(str_cat(path, ": cannot open ", temp, " for writing (", std::strerror(errno), ")"));
    try {
      write(out);
    } catch (...) {
      out.close();
      std::remove(temp.c_str());
      throw;
    }
    out.flush();
    if (!out) fail("write failed (disk full?)");
    out.close();  // a buffered write can fail only here
    if (out.fail()) fail("write failed on close (disk full?)");
  }
  if (!sync_to_disk(temp)) fail(str_cat("cannot sync to disk (", std::strerror(errno), ")"));
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) fail(str_cat("cannot rename into place (", ec.message(), ")"));
}

void write_file_atomically(const std::string& path, const std::string& content) {
  write_file_atomically(
      path, [&](std::ostream& out) { out.write(content.data(), static_cast<std::streamsize>(content.size())); });
}

}  // namespace magic
