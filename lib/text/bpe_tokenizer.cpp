#include "lib/text/bpe_tokenizer.h"

#include <algorithm>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/text/gpt2_split.h"
#include "lib/text/unicode_text.h"

namespace magic {

BpeTokenizer::BpeTokenizer(BpeModel model, BpeTokenizerOptions options)
    : model_(std::move(model)), options_(std::move(options)) {
  vocab_bound_ = model_.id_bound();
  for (const auto& t : options_.added_tokens) vocab_bound_ = std::max(vocab_bound_, t.id + 1);
  // Longest first: at one position the longest added token wins.
  std::stable_sort(options_.added_tokens.begin(), options_.added_tokens.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
}

std::vector<int64_t> BpeTokenizer::encode(const std::string& raw, const std::string& where) const {
  decode_utf8(raw, where);  // refuses invalid UTF-8 before anything else looks at it
  const std::string text = options_.nfc ? nfc(raw, where) : raw;
  std::vector<int64_t> ids;
  size_t segment_start = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* match = nullptr;
    for (const auto& t : options_.added_tokens) {
      if (!t.content.empty() && text.compare(i, t.content.size(), t.content) == 0) {
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    encode_segment(text.substr(segment_start, i - segment_start), where, ids);
    ids.push_back(match->id);
    i += match->content.size();
    segment_start = i;
  }
  encode_segment(text.substr(segment_start), where, ids);
  return ids;
}

void BpeTokenizer::encode_segment(const std::string& segment, const std::string& where,
                                  std::vector<int64_t>& ids) const {
  if (segment.empty()) return;
  const std::string text = options_.add_prefix_space && segment[0] != ' ' ? " " + segment : segment;
  for (const std::string& piece : gpt2_split(text, where)) {
    const std::vector<int64_t> piece_ids = model_.encode_piece(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
}

const AddedToken* BpeTokenizer::added(int64_t id) const {
  for (const auto& t : options_.added_tokens) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::string BpeTokenizer::token_bytes(int64_t id) const {
  if (const AddedToken* t = added(id)) return t->content;
  return model_.token_bytes(id);
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    if (added(id) == nullptr && model_.token(id) == nullptr) {
      throw InputError(str_cat("id ", id, " is not a token of this tokenizer (ids 0..", vocab_bound_ - 1, ")"));
    }
    out += token_bytes(id);
  }
  return out;
}

}  // namespace magic
