#include "lib/text/bpe_model.h"

#include <array>
#include <limits>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/core/utf8.h"
#include "lib/text/unicode_text.h"

namespace magic {
namespace {

constexpr int kNoRank = std::numeric_limits<int>::max();
// Word cache bound: enough for a corpus's distinct pieces, not a leak on an unbounded stream.
constexpr size_t kCacheLimit = 1 << 18;

std::array<std::string, 256> make_byte_chars() {
  std::array<std::string, 256> chars;
  char32_t shifted = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(printable ? static_cast<char32_t>(b) : shifted++, chars[b]);
  }
  return chars;
}

const std::array<std::string, 256>& byte_chars() {
  static const std::array<std::string, 256> chars = make_byte_chars();
  return chars;
}

const std::unordered_map<std::string, uint8_t>& char_bytes() {
  static const auto map = [] {
    std::unordered_map<std::string, uint8_t> m;
    for (int b = 0; b < 256; ++b) m.emplace(byte_chars()[b], static_cast<uint8_t>(b));
    return m;
  }();
  return map;
}

}  // namespace

const std::string& byte_char(uint8_t b) {
  return byte_chars()[b];
}

BpeModel::BpeModel(std::unordered_map<std::string, int64_t> vocab,
                   std::vector<std::pair<std::string, std::string>> merges, const std::string& source,
                   const std::string& merges_source)
    : vocab_(std::move(vocab)) {
  const int64_t id_limit = 2 * static_cast<int64_t>(vocab_.size()) + 1024;
  for (const auto& [text, id] : vocab_) {
    if (id < 0 || id >= id_limit) {
      throw InputError(str_cat(source, ": vocabulary token '", quoted_input(text), "' has id ", id, ", expected 0..",
                               id_limit - 1, " (ids below 2 x its ", vocab_.size(),
                               " entries + 1024: docs/limits.md)"));
    }
    if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(id + 1);
    if (!tokens_[id].empty()) {
      throw InputError(str_cat(source, ": id ", id, " is given to both '", quoted_input(tokens_[id]), "' and '",
                               quoted_input(text), "'"));
    }
    tokens_[id] = text;
  }
  for (int b = 0; b < 256; ++b) {
    if (vocab_.count(byte_char(b)) == 0) {
      throw InputError(str_cat(source, ": the vocabulary has no token for byte ", b, " ('", byte_char(b),
                               "'): not a byte-level BPE vocabulary"));
    }
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [left, right] = merges[r];
    if (vocab_.count(left + right) == 0) {
      throw InputError(str_cat(merges_source.empty() ? source : merges_source, ": merge ", r, " ('", quoted_input(left),
                               " ", quoted_input(right), "') makes '", quoted_input(left + right),
                               "', which is not in the vocabulary", merges_source.empty() ? "" : " of " + source));
    }
    // The first rank of a repeated merge is the one that counts, as in the reference encoder.
    ranks_.emplace(left + " " + right, static_cast<int>(r));
  }
}

int BpeModel::rank(const std::string& left, const std::string& right) const {
  auto it = ranks_.find(left + " " + right);
  return it == ranks_.end() ? kNoRank : it->second;
}

std::vector<int64_t> BpeModel::encode_piece(const std::string& piece) const {
  if (auto hit = cache_.find(piece); hit != cache_.end()) return hit->second;
  std::vector<std::string> symbols;
  symbols.reserve(piece.size());
  for (unsigned char b : piece) symbols.push_back(byte_char(b));
  while (symbols.size() > 1) {
    int best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const int r = rank(symbols[i], symbols[i + 1]);
      if (r < best) best = r, at = i;
    }
    if (best == kNoRank) break;
    const std::string left = symbols[at], right = symbols[at + 1];
    std::vector<std::string> merged;
    merged.reserve(symbols.size());
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
        merged.push_back(left + right);
        ++i;
      } else {
        merged.push_back(std::move(symbols[i]));
      }
    }
    symbols = std::move(merged);
  }
  std::vector<int64_t> ids;
  ids.reserve(symbols.size());
  for (const auto& s : symbols) ids.push_back(vocab_.at(s));  // checked at construction
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(piece, ids);
  return ids;
}

const std::string* BpeModel::token(int64_t id) const {
  if (id < 0 || id >= id_bound() || tokens_[id].empty()) return nullptr;
  return &tokens_[id];
}

std::string BpeModel::token_bytes(int64_t id) const {
  const std::string* text = token(id);
  if (text == nullptr) return "";
  std::string bytes;
  // Byte characters are one or two UTF-8 bytes long (U+0021..U+0143).
  for (size_t i = 0; i < text->size();) {
    const size_t length = (static_cast<unsigned char>((*text)[i]) < 0x80) ? 1 : 2;
    auto it = char_bytes().find(text->substr(i, length));
    if (it == char_bytes().end()) return *text;  // not a byte-level token (an added token's text)
    bytes += static_cast<char>(it->second);
    i += length;
  }
  return bytes;
}

int64_t BpeModel::find(const std::string& token_text) const {
  auto it = vocab_.find(token_text);
  return it == vocab_.end() ? -1 : it->second;
}

}  // namespace magic
