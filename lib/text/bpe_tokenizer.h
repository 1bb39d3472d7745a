// A byte-level BPE tokenizer as GPT-2 and GPT-NeoX (Pythia) ship it: optional NFC normalization,
// added tokens cut out first (leftmost, longest), GPT-2's split of the rest, BPE on each piece.
// Loaded from a model folder by load_tokenizer_folder (tokenizer_folder.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/text/bpe_model.h"

namespace magic {

// A token matched in the text before BPE (special ones such as <|endoftext|>, and GPT-NeoX's
// runs of spaces).
struct AddedToken {
  int64_t id;
  std::string content;
  bool special = false;
};

struct BpeTokenizerOptions {
  bool nfc = false;               // normalizer: NFC
  bool add_prefix_space = false;  // a space before each text that does not start with one
  std::vector<AddedToken> added_tokens;
  std::optional<int64_t> eos_id, bos_id, pad_id;
};

class BpeTokenizer {
 public:
  BpeTokenizer(BpeModel model, BpeTokenizerOptions options);

  // The ids of UTF-8 `text` (no end-of-text token added); `where` names the text in errors.
  // Not thread-safe (the model caches pieces).
  std::vector<int64_t> encode(const std::string& text, const std::string& where = "text") const;
  // The bytes the ids stand for, concatenated (special tokens as their text). A cut through a
  // multi-byte character leaves its bytes as they are. An id that is no token: InputError.
  std::string decode(const std::vector<int64_t>& ids) const;
  // One token's bytes (for per-token displays); "" for an unknown id.
  std::string token_bytes(int64_t id) const;

  // One more than the largest id the tokenizer can produce: the model's vocabulary must be this big.
  int64_t vocab_bound() const { return vocab_bound_; }
  const std::optional<int64_t>& eos_id() const { return options_.eos_id; }
  const std::optional<int64_t>& bos_id() const { return options_.bos_id; }
  // Padding id: the pad token, else the end-of-text token.
  std::optional<int64_t> pad_id() const { return options_.pad_id ? options_.pad_id : options_.eos_id; }

 private:
  void encode_segment(const std::string& segment, const std::string& where, std::vector<int64_t>& ids) const;
  const AddedToken* added(int64_t id) const;

  BpeModel model_;
  BpeTokenizerOptions options_;
  int64_t vocab_bound_ = 0;
};

}  // namespace magic
