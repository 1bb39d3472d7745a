#include "lib/data/tokenizer.h"

#include <filesystem>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/text/tokenizer_folder.h"

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

FolderTokenizer::FolderTokenizer(const std::string& folder)
    : bpe_(std::make_shared<const BpeTokenizer>(load_tokenizer_folder(folder))) {
  if (!bpe_->eos_id()) {
    throw InputError(str_cat(folder, ": no end-of-text token (config.json's eos_token_id or tokenizer_config.json's ",
                             "eos_token): each document ends with one"));
  }
  end_of_document_ = *bpe_->eos_id();
  pad_id_ = *bpe_->pad_id();
  const bool json = std::filesystem::exists(std::filesystem::path(folder) / "tokenizer.json");
  description_ = str_cat("BPE of ", folder, json ? " (tokenizer.json)" : " (vocab.json, merges.txt)");
}

std::vector<int64_t> FolderTokenizer::encode_document(const std::string& text, const std::string& where) const {
  std::vector<int64_t> ids = bpe_->encode(text, where);
  ids.push_back(end_of_document_);
  return ids;
}

std::string FolderTokenizer::token_text(int64_t id) const {
  return id == end_of_document_ ? std::string() : bpe_->token_bytes(id);
}

}  // namespace magic
