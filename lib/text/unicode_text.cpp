#include "lib/text/unicode_text.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

std::vector<CodePoint> decode_utf8(const std::string& text, const std::string& where) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  auto bad = [&](const char* why) { throw InputError(str_cat(where, ": invalid UTF-8 at byte ", i, " (", why, ")")); };
  while (i < n) {
    const unsigned char lead = s[i];
    size_t length = 1;
    char32_t c = lead, least = 0;
    if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4, c = lead & 0x07, least = 0x10000;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3, c = lead & 0x0F, least = 0x800;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2, c = lead & 0x1F, least = 0x80;
    } else if (lead >= 0x80) {
      bad(lead < 0xC0 ? "a continuation byte where a character starts" : "a byte no UTF-8 character starts with");
    }
    if (i + length > n) bad("the text ends inside a character");
    for (size_t k = 1; k < length; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) bad("a character cut short");
      c = (c << 6) | (s[i + k] & 0x3F);
    }
    if (c < least) bad("an overlong form");
    if (c >= 0xD800 && c <= 0xDFFF) bad("a surrogate");
    if (c > 0x10FFFF) bad("past U+10FFFF");
    out.push_back({c, i});
    i += length;
  }
  return out;
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

CharClass char_class(char32_t c) {
  const auto code = static_cast<UChar32>(c);
  if (u_isUWhiteSpace(code)) return CharClass::kSpace;
  const uint32_t mask = U_GET_GC_MASK(code);
  if (mask & U_GC_L_MASK) return CharClass::kLetter;
  if (mask & U_GC_N_MASK) return CharClass::kNumber;
  return CharClass::kOther;
}

std::string nfc(const std::string& text, const std::string& where) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw std::runtime_error(str_cat(where, ": ICU's NFC normalizer: ", u_errorName(status)));
  const icu::UnicodeString input = icu::UnicodeString::fromUTF8(text);
  // Most text is NFC already: skip the copy.
  if (normalizer->isNormalized(input, status) && U_SUCCESS(status)) return text;
  status = U_ZERO_ERROR;
  const icu::UnicodeString composed = normalizer->normalize(input, status);
  if (U_FAILURE(status)) throw std::runtime_error(str_cat(where, ": NFC normalization: ", u_errorName(status)));
  std::string out;
  composed.toUTF8String(out);
  return out;
}

}  // namespace magic
