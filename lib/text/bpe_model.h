// Byte-level BPE (GPT-2's): a piece's bytes, each written as one printable character (byte_char),
// are merged pair by pair, lowest merge rank first, into vocabulary tokens.
//   merge step: among adjacent pairs pick the one of lowest rank; join every occurrence of it,
//               left to right; repeat until no adjacent pair has a rank.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace magic {

// The printable character GPT-2 writes byte `b` as (UTF-8): printable Latin-1 bytes stand for
// themselves, the other 68 are shifted to U+0100.. in byte order ("Ġ" is the space).
const std::string& byte_char(uint8_t b);

class BpeModel {
 public:
  // `vocab`: token text -> id; `merges` in rank order. Every merge's result, and every byte's
  // character, must be a vocabulary token, and ids lie below 2·entries + 1024 (they are dense in
  // every tokenizer we read; a far id would size the id table: docs/limits.md). Checked here;
  // `source` names the vocabulary's file in errors, `merges_source` the merges' (default: source).
  BpeModel(std::unordered_map<std::string, int64_t> vocab, std::vector<std::pair<std::string, std::string>> merges,
           const std::string& source, const std::string& merges_source = "");

  // The ids of one pre-tokenized piece (raw bytes, not yet written as byte characters).
  std::vector<int64_t> encode_piece(const std::string& piece) const;

  // The token's text in byte characters, or nullptr for an id not in the vocabulary.
  const std::string* token(int64_t id) const;
  // The raw bytes a vocabulary token stands for.
  std::string token_bytes(int64_t id) const;
  int64_t find(const std::string& token_text) const;  // -1 when absent
  int64_t size() const { return static_cast<int64_t>(vocab_.size()); }
  // One more than the largest id (ids need not be dense).
  int64_t id_bound() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  int rank(const std::string& left, const std::string& right) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> tokens_;             // id -> text ("" where no token has the id)
  std::unordered_map<std::string, int> ranks_;  // "left right" -> rank
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace magic
