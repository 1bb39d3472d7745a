// The tokenizers of the data path. DocumentTokenizer is what tokenize_documents and the reports
// need: a document's ids (ending with the end-of-document token), the padding id, the ids it can
// produce, and each token's text. Two implement it:
//   ByteTokenizer      the built-in model's: one token per UTF-8 byte (0..255) and an
//                      end-of-document token 256, which also fills padding. Vocabulary 257.
//   FolderTokenizer    a model folder's byte-level BPE (lib/text), ending each document with the
//                      folder's end-of-text token and padding with its pad token (or end of text).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/text/bpe_tokenizer.h"

namespace magic {

class DocumentTokenizer {
 public:
  virtual ~DocumentTokenizer() = default;
  // The ids of `text` followed by the end-of-document token; `where` names the text in errors.
  virtual std::vector<int64_t> encode_document(const std::string& text, const std::string& where) const = 0;
  virtual int64_t end_of_document() const = 0;
  virtual int64_t pad_id() const = 0;
  // One more than the largest id it produces: the model's vocabulary must be at least this.
  virtual int64_t vocab_bound() const = 0;
  // The bytes a token stands for, for displays ("" for the end-of-document token).
  virtual std::string token_text(int64_t id) const = 0;
  // "bytes", or "BPE of DIR (tokenizer.json)": for the run's summary line.
  virtual std::string description() const = 0;
};

class ByteTokenizer : public DocumentTokenizer {
 public:
  static constexpr int64_t kEndOfDocument = 256;
  static constexpr int64_t kVocabSize = 257;

  // The bytes of `text` followed by kEndOfDocument.
  std::vector<int64_t> encode(const std::string& text) const;
  // Bytes back to text; kEndOfDocument and out-of-range ids are dropped.
  std::string decode(const std::vector<int64_t>& tokens) const;

  std::vector<int64_t> encode_document(const std::string& text, const std::string&) const override {
    return encode(text);
  }
  int64_t end_of_document() const override { return kEndOfDocument; }
  int64_t pad_id() const override { return kEndOfDocument; }
  int64_t vocab_bound() const override { return kVocabSize; }
  std::string token_text(int64_t id) const override { return decode({id}); }
  std::string description() const override { return "bytes"; }
};

class FolderTokenizer : public DocumentTokenizer {
 public:
  // Loads DIR's tokenizer (tokenizer_folder.h); InputError where it names no end-of-text token.
  explicit FolderTokenizer(const std::string& folder);

  std::vector<int64_t> encode_document(const std::string& text, const std::string& where) const override;
  int64_t end_of_document() const override { return end_of_document_; }
  int64_t pad_id() const override { return pad_id_; }
  int64_t vocab_bound() const override { return bpe_->vocab_bound(); }
  std::string token_text(int64_t id) const override;
  std::string description() const override { return description_; }

 private:
  std::shared_ptr<const BpeTokenizer> bpe_;
  int64_t end_of_document_ = 0, pad_id_ = 0;
  std::string description_;
};

}  // namespace magic
