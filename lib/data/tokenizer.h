// Byte-level tokenizer: one token per UTF-8 byte (0..255) and an end-of-document token 256,
// which also fills padding. Vocabulary size 257.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magic {

class ByteTokenizer {
 public:
  static constexpr int64_t kEndOfDocument = 256;
  static constexpr int64_t kVocabSize = 257;

  // The bytes of `text` followed by kEndOfDocument.
  std::vector<int64_t> encode(const std::string& text) const;
  // Bytes back to text; kEndOfDocument and out-of-range ids are dropped.
  std::string decode(const std::vector<int64_t>& tokens) const;
};

}  // namespace magic
