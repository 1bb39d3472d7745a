#include "lib/data/tokenizer.h"

namespace magic {

std::vector<int64_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> tokens;
  tokens.reserve(text.size() + 1);
  for (unsigned char c : text) tokens.push_back(c);
  tokens.push_back(kEndOfDocument);
  return tokens;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& tokens) const {
  std::string text;
  for (int64_t t : tokens) {
    if (t >= 0 && t < 256) text.push_back(static_cast<char>(t));
  }
  return text;
}

}  // namespace magic
