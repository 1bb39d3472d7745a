// The Unicode facts a byte-level BPE tokenizer needs: UTF-8 decoding, the character classes of
// GPT-2's split pattern (\p{L}, \p{N}, \s) and NFC normalization. Classes come from ICU, so that
// they follow the Unicode tables rather than a copy of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magic {

// One decoded character and where its bytes start in the text.
struct CodePoint {
  char32_t value;
  size_t offset;
};

// The characters of UTF-8 `text`; throws InputError naming `where` and the byte offset on an
// invalid sequence (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF).
std::vector<CodePoint> decode_utf8(const std::string& text, const std::string& where);

void append_utf8(char32_t c, std::string& out);

// The classes of GPT-2's pattern. kSpace is Unicode's White_Space property (as Python's
// `regex` and the Hugging Face tokenizers read \s; JavaScript's \s differs at U+0085 and U+FEFF).
enum class CharClass { kLetter, kNumber, kSpace, kOther };
CharClass char_class(char32_t c);

// The NFC form of UTF-8 `text` (canonical composition), as the GPT-NeoX tokenizer's normalizer.
std::string nfc(const std::string& text, const std::string& where);

}  // namespace magic
