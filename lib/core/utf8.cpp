#include "lib/core/utf8.h"

namespace magic {

size_t utf8_sequence_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

size_t first_invalid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string::npos;
}

std::string byte_escape(unsigned char byte) {
  static const char* kHex = "0123456789ABCDEF";
  return {'\\', 'x', kHex[byte >> 4], kHex[byte & 15]};
}

std::string printable_text(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    if (n > 0) {
      out.append(text, i, n);
      i += n;
    } else {
      out += byte_escape(static_cast<unsigned char>(text[i++]));
    }
  }
  return out;
}

std::string one_line_text(const std::string& text, bool escape_backslash) {
  std::string out;
  for (char c : printable_text(text)) {
    switch (c) {
      case '\\':
        out += escape_backslash ? "\\\\" : "\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string quoted_input(const std::string& text, size_t max_characters) {
  std::string out;
  size_t characters = 0;
  for (const char c : printable_text(text)) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte & 0xC0) != 0x80 && characters++ == max_characters) return out + "...";
    out += byte < 0x20 || byte == 0x7F ? byte_escape(byte) : std::string(1, c);
  }
  return out;
}

}  // namespace magic
