// Tokenized examples: each document is encoded (ending with the end-of-document token) and fitted
// to rows of max_len tokens (Fit), padded to [N, max_len] tensors. Padding positions hold the
// tokenizer's pad id as input and -100 as label. A prompt/completion pair is the prompt's tokens
// (its end token left out) then the completion's, each encoded on its own so that the boundary is
// a token boundary; the prompt's labels are -100, so only completion tokens carry loss. A row
// whose labels after its first position are all -100 has nothing to predict and is dropped.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lib/data/text_loader.h"
#include "lib/data/tokenizer.h"

namespace magic {

// How documents become rows of max_len tokens.
enum class Fit {
  kChunk,     // each document cut into consecutive rows; chunk k of a document is "id#k"
  kTruncate,  // each document's first max_len tokens; the rest is dropped
  kPack,      // all documents' tokens end to end, cut into rows "pack:k" (rows cross documents,
              // as in packed fine-tuning: attention is not reset at a document's end)
};
Fit parse_fit(const std::string& name, const std::string& what = "fit");
std::string fit_name(Fit fit);

struct Example {
  std::string id;        // the document id, with "#k" for chunk k of a multi-chunk document
  int64_t document = 0;  // index into the loaded documents (packed: the document the row begins in)
  int64_t length = 0;    // real tokens in the chunk (the rest is padding)
  int64_t offset = 0;    // the chunk's first token in its document's tokens
};

struct TokenDataset {
  at::Tensor input_ids;  // [N, T] int64
  at::Tensor labels;     // [N, T] int64, -100 on padding
  // A multimodal dataset's patch features [N, P, F] (patch_features.h), its rows' first P columns
  // the prefix's (pad id, label -100); undefined: text only.
  at::Tensor patches;
  std::vector<Example> examples;
  int64_t pad_id = ByteTokenizer::kEndOfDocument;  // the input id of padding positions and rows
  // How the documents became examples, for the run's one-line summary.
  int64_t documents = 0;            // documents tokenized
  int64_t split_documents = 0;      // documents longer than max_len tokens (their end token included), cut into chunks
  int64_t dropped_documents = 0;    // documents that gave no example (fewer than 2 tokens, or no label)
  int64_t truncated_documents = 0;  // documents longer than max_len whose end was dropped (Fit::kTruncate)
  bool packed = false;

  int64_t size() const { return static_cast<int64_t>(examples.size()); }
  int64_t max_len() const { return input_ids.size(1); }
};

// Throws InputError for max_len < 2 or when no document yields an example. `source` begins every
// message: the file, and what it is to the run.
TokenDataset tokenize_documents(const std::vector<TextDocument>& documents, const DocumentTokenizer& tokenizer,
                                int64_t max_len, const std::string& source = "data", Fit fit = Fit::kChunk);

// The text of example i: its tokens' bytes, end of document left out (a chunk may end inside a
// multi-byte UTF-8 character; the next chunk holds the rest).
std::string example_text(const TokenDataset& data, int64_t i, const DocumentTokenizer& tokenizer);

// Example i's text in parts, in order: runs of tokens that carry no loss (a pair's prompt) and of
// tokens that do (a completion, or all of a text document's); the parts' texts joined are
// example_text's.
struct TextPart {
  std::string text;
  bool prompt = false;
};
std::vector<TextPart> example_parts(const TokenDataset& data, int64_t i, const DocumentTokenizer& tokenizer);

}  // namespace magic
