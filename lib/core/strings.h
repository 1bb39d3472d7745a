// Small string helpers: message building and number formatting.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace magic {

// Concatenates anything streamable: str_cat("step ", t, " of ", n).
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::string join(const std::vector<std::string>& parts, const std::string& separator);
// The pieces between separators ("a,,b" -> "a", "", "b"; "" -> one empty piece).
std::vector<std::string> split(const std::string& text, char separator);

// Shortest round-trip text for a double ("0.25", "1e-12").
std::string format_number(double value);

// Fixed notation with `digits` after the point.
std::string format_fixed(double value, int digits);

// Scientific notation with `digits` significant digits after the point ("4.0e-07").
std::string format_sci(double value, int digits);

// The entity for a character that HTML and XML text must escape (& < > " '), or nullptr.
// `apostrophe` spells the last: "&apos;" (XML) or "&#39;" (HTML).
const char* markup_entity(char c, const char* apostrophe);

// `text` with XML's five special characters escaped.
std::string xml_escape(const std::string& text);

// `text` padded with blanks to `width` display columns (UTF-8: "≈" is one column), or followed by
// one blank where it is that wide already: a table cell.
std::string pad(const std::string& text, size_t width);

}  // namespace magic
