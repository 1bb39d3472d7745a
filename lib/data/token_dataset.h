// Tokenized examples: each document is encoded, cut into chunks of at most max_len tokens
// (chunks of fewer than 2 tokens hold no label and are dropped), and padded to [N, max_len]
// tensors. Padding positions hold kEndOfDocument as input and -100 as label.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lib/data/text_loader.h"
#include "lib/data/tokenizer.h"

namespace magic {

struct Example {
  std::string id;        // the document id, with "#k" for chunk k of a multi-chunk document
  int64_t document = 0;  // index into the loaded documents
  int64_t length = 0;    // real tokens in the chunk (the rest is padding)
  int64_t offset = 0;    // the chunk's first token in its document (a byte offset: one token a byte)
};

struct TokenDataset {
  at::Tensor input_ids;  // [N, T] int64
  at::Tensor labels;     // [N, T] int64, -100 on padding
  std::vector<Example> examples;
  // How the documents became examples, for the run's one-line summary.
  int64_t documents = 0;          // documents tokenized
  int64_t split_documents = 0;    // documents longer than max_len tokens (their end token included), cut into chunks
  int64_t dropped_documents = 0;  // documents that gave no example (fewer than 2 tokens)

  int64_t size() const { return static_cast<int64_t>(examples.size()); }
  int64_t max_len() const { return input_ids.size(1); }
};

// Throws InputError for max_len < 2 or when no document yields an example.
TokenDataset tokenize_documents(const std::vector<TextDocument>& documents, const ByteTokenizer& tokenizer,
                                int64_t max_len, const std::string& source = "data");

// The text of one example: its chunk of the document's bytes (a chunk may end inside a
// multi-byte UTF-8 character; the next chunk holds the rest).
std::string example_text(const Example& example, const std::vector<TextDocument>& documents);

}  // namespace magic
