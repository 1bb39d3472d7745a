#include "lib/distributed/runtime/console.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <streambuf>
#include <string>

namespace magic::dist {
namespace {

// Unbuffered writes to a descriptor: a progress line is whole when it is written.
class FdBuffer : public std::streambuf {
 public:
  explicit FdBuffer(int fd) : fd_(fd) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char byte = traits_type::to_char_type(c);
    return xsputn(&byte, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    std::streamsize done = 0;
    while (done < n) {
      const ssize_t wrote = write(fd_, data + done, static_cast<size_t>(n - done));
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) break;
      done += wrote;
    }
    return done;
  }

 private:
  int fd_;
};

}  // namespace

int console_fd() {
  const char* value = std::getenv("MAGIC_CONSOLE_FD");
  if (value == nullptr) return STDERR_FILENO;
  char* end = nullptr;
  const long fd = std::strtol(value, &end, 10);
  return end != value && *end == '\0' && fd >= 0 ? static_cast<int>(fd) : STDERR_FILENO;
}

std::ostream& console() {
  const int fd = console_fd();
  if (fd == STDERR_FILENO) return std::cerr;
  static FdBuffer buffer(fd);
  static std::ostream stream(&buffer);
  return stream;
}

}  // namespace magic::dist
