#include "lib/core/strings.h"

#include <cstdio>
#include <iomanip>

namespace magic {

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at = text.find(separator); at != std::string::npos; at = text.find(separator, start)) {
    parts.push_back(text.substr(start, at - start));
    start = at + 1;
  }
  parts.push_back(text.substr(start));
  return parts;
}

std::string format_number(double value) {
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

std::string format_fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

std::string format_sci(double value, int digits) {
  std::ostringstream out;
  out << std::scientific << std::setprecision(digits) << value;
  return out.str();
}

const char* markup_entity(char c, const char* apostrophe) {
  switch (c) {
    case '&':
      return "&amp;";
    case '<':
      return "&lt;";
    case '>':
      return "&gt;";
    case '"':
      return "&quot;";
    case '\'':
      return apostrophe;
    default:
      return nullptr;
  }
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    const char* entity = markup_entity(c, "&apos;");
    if (entity) {
      out += entity;
    } else {
      out += c;
    }
  }
  return out;
}

std::string pad(const std::string& text, size_t width) {
  size_t columns = 0;
  for (unsigned char c : text) columns += (c & 0xC0) != 0x80;
  return columns >= width ? text + " " : text + std::string(width - columns, ' ');
}

}  // namespace magic
