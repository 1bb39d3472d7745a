#include "lib/core/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 6) {
    bytes /= 1024.0;
    ++unit;
  }
  return unit == 0 ? str_cat(static_cast<int64_t>(bytes), " B") : str_cat(format_fixed(bytes, 1), " ", kUnits[unit]);
}

int64_t parse_byte_size(const std::string& text, const std::string& what) {
  const auto refuse = [&] {
    return InputError(str_cat(what, ": expected a size such as \"256MiB\" or \"1.5GiB\" (units B, KiB, MiB, GiB, ",
                              "TiB; a plain number is bytes), got \"", text, "\""));
  };
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value) || value < 0 || !std::isdigit(static_cast<unsigned char>(text[0]))) {
    throw refuse();
  }
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "KiB") scale = 1024.0;
  if (unit == "MiB") scale = 1024.0 * 1024;
  if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  if (scale == 0) throw refuse();
  const double bytes = std::floor(value * scale);
  if (bytes > std::ldexp(1.0, 62)) throw InputError(str_cat(what, ": ", text, " is past 2^62 bytes"));
  return static_cast<int64_t>(bytes);
}

}  // namespace magic
