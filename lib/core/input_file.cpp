#include "lib/core/input_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(str_cat(path, ": cannot open ", what, " (", std::strerror(errno), ")"));
  }
  if (!S_ISREG(st.st_mode)) throw InputError(str_cat(path, ": is ", kind_of(st.st_mode), ", expected a ", what));
}

std::string read_input_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(str_cat(path, ": cannot open ", what));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size > max_bytes) {
    throw InputError(str_cat(path, ": ", size, " bytes, more than the ", max_bytes, " bytes a ", what,
                             " may hold (docs/limits.md)"));
  }
  in.seekg(0, std::ios::beg);
  // Read at most the bound even if the file grew since: the size is the one checked.
  std::string text(static_cast<size_t>(std::max<std::streamoff>(size, 0)), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) throw InputError(str_cat(path, ": cannot read ", what));
  return text;
}

bool read_bounded_line(std::istream& in, std::string& line, int64_t max_bytes, const std::string& where,
                       int64_t line_number) {
  line.clear();
  std::streambuf* buffer = in.rdbuf();
  for (;;) {
    const int c = buffer->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return !line.empty();
    }
    if (c == '\n') return true;
    if (static_cast<int64_t>(line.size()) >= max_bytes) {
      throw InputError(str_cat(where, ": line ", line_number, " is longer than ", max_bytes,
                               " bytes (the bound on one line: docs/limits.md)"));
    }
    line.push_back(static_cast<char>(c));
  }
}

}  // namespace magic
