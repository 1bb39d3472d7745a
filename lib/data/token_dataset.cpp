#include "lib/data/token_dataset.h"

#include <algorithm>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/model/lm_loss.h"

namespace magic {

namespace {

struct Row {
  std::vector<int64_t> ids, labels;
  Example example;
};

struct EncodedDocument {
  std::vector<int64_t> ids, labels;
};

EncodedDocument encode(const TextDocument& document, const DocumentTokenizer& tokenizer, const std::string& source) {
  const std::string where = str_cat(source, ": '", document.id, "'");
  EncodedDocument out;
  if (!document.prompt.empty()) {
    out.ids = tokenizer.encode_document(document.prompt, where + " (prompt)");
    out.ids.pop_back();  // the prompt continues into the completion: no end of document between
    out.labels.assign(out.ids.size(), kIgnoreLabel);
  }
  const std::vector<int64_t> text = tokenizer.encode_document(document.text, where);
  out.ids.insert(out.ids.end(), text.begin(), text.end());
  out.labels.insert(out.labels.end(), text.begin(), text.end());
  return out;
}

// Some position after the first holds a label (position 0 is never predicted).
bool predicts_something(const std::vector<int64_t>& labels) {
  return std::any_of(labels.begin() + std::min<size_t>(1, labels.size()), labels.end(),
                     [](int64_t label) { return label != kIgnoreLabel; });
}

Row slice(const EncodedDocument& d, int64_t begin, int64_t end, Example example) {
  example.length = end - begin;
  example.offset = begin;
  return {{d.ids.begin() + begin, d.ids.begin() + end}, {d.labels.begin() + begin, d.labels.begin() + end}, example};
}

// Every document's tokens end to end, cut every max_len; a row names the document it begins in.
std::vector<Row> pack(const std::vector<EncodedDocument>& encoded, int64_t max_len) {
  EncodedDocument stream;
  std::vector<int64_t> owner, offset;  // per stream position: its document and place in it
  for (size_t d = 0; d < encoded.size(); ++d) {
    stream.ids.insert(stream.ids.end(), encoded[d].ids.begin(), encoded[d].ids.end());
    stream.labels.insert(stream.labels.end(), encoded[d].labels.begin(), encoded[d].labels.end());
    for (size_t j = 0; j < encoded[d].ids.size(); ++j) {
      owner.push_back(static_cast<int64_t>(d));
      offset.push_back(static_cast<int64_t>(j));
    }
  }
  std::vector<Row> rows;
  const auto n = static_cast<int64_t>(stream.ids.size());
  for (int64_t begin = 0, k = 0; begin < n; begin += max_len, ++k) {
    Row row = slice(stream, begin, std::min(n, begin + max_len), {str_cat("pack:", k), owner[begin]});
    row.example.offset = offset[begin];
    if (predicts_something(row.labels)) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

Fit parse_fit(const std::string& name, const std::string& what) {
  if (name == "chunk") return Fit::kChunk;
  if (name == "truncate") return Fit::kTruncate;
  if (name == "pack") return Fit::kPack;
  throw InputError(str_cat(what, ": unknown fit '", name, "' (expected chunk, truncate or pack)"));
}

std::string fit_name(Fit fit) {
  return fit == Fit::kChunk ? "chunk" : fit == Fit::kTruncate ? "truncate" : "pack";
}

TokenDataset tokenize_documents(const std::vector<TextDocument>& documents, const DocumentTokenizer& tokenizer,
                                int64_t max_len, const std::string& source, Fit fit) {
  if (max_len < 2) {
    throw InputError(str_cat(source, ": max_len must be >= 2 (a token and the token it predicts), got ", max_len));
  }
  std::vector<EncodedDocument> encoded;
  encoded.reserve(documents.size());
  for (const auto& document : documents) encoded.push_back(encode(document, tokenizer, source));
  TokenDataset data;
  data.documents = static_cast<int64_t>(documents.size());
  std::vector<Row> rows;
  if (fit == Fit::kPack) {
    rows = pack(encoded, max_len);
    data.packed = true;
  } else {
    for (size_t d = 0; d < documents.size(); ++d) {
      const auto n = static_cast<int64_t>(encoded[d].ids.size());
      const int64_t pieces = fit == Fit::kTruncate ? 1 : (n + max_len - 1) / max_len;
      const size_t rows_before = rows.size();
      for (int64_t k = 0; k < pieces; ++k) {
        const int64_t begin = k * max_len, end = std::min(n, begin + max_len);
        std::string id = pieces > 1 ? str_cat(documents[d].id, "#", k) : documents[d].id;
        Row row = slice(encoded[d], begin, end, {id, static_cast<int64_t>(d)});
        if (predicts_something(row.labels)) rows.push_back(std::move(row));
      }
      if (pieces > 1) ++data.split_documents;
      if (fit == Fit::kTruncate && n > max_len) ++data.truncated_documents;
      if (rows.size() == rows_before) ++data.dropped_documents;
    }
  }
  if (rows.empty()) {
    const size_t n = documents.size();
    throw InputError(str_cat(source, ": ",
                             n == 0 ? std::string("holds no document")
                             : n == 1
                                 ? std::string("its one document yields no example with a token to predict")
                                 : str_cat("none of its ", n, " documents yields an example with a token to predict")));
  }
  const auto N = static_cast<int64_t>(rows.size());
  data.pad_id = tokenizer.pad_id();
  data.input_ids = at::full({N, max_len}, data.pad_id, at::kLong);
  data.labels = at::full({N, max_len}, kIgnoreLabel, at::kLong);
  auto ids = data.input_ids.accessor<int64_t, 2>();
  auto labels = data.labels.accessor<int64_t, 2>();
  for (int64_t i = 0; i < N; ++i) {
    const Row& row = rows[i];
    for (size_t j = 0; j < row.ids.size(); ++j) {
      ids[i][j] = row.ids[j];
      labels[i][j] = row.labels[j];
    }
    data.examples.push_back(row.example);
  }
  return data;
}

std::string example_text(const TokenDataset& data, int64_t i, const DocumentTokenizer& tokenizer) {
  const Example& example = data.examples.at(static_cast<size_t>(i));
  const at::Tensor ids = data.input_ids[i].slice(0, 0, example.length).contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  std::string text;
  for (int64_t j = 0; j < example.length; ++j) text += tokenizer.token_text(id[j]);
  return text;
}

std::vector<TextPart> example_parts(const TokenDataset& data, int64_t i, const DocumentTokenizer& tokenizer) {
  const Example& example = data.examples.at(static_cast<size_t>(i));
  const at::Tensor ids = data.input_ids[i].slice(0, 0, example.length).contiguous();
  const at::Tensor labels = data.labels[i].slice(0, 0, example.length).contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  const int64_t* label = labels.data_ptr<int64_t>();
  std::vector<TextPart> parts;
  for (int64_t j = 0; j < example.length; ++j) {
    const bool prompt = label[j] == kIgnoreLabel;
    if (parts.empty() || parts.back().prompt != prompt) parts.push_back({"", prompt});
    parts.back().text += tokenizer.token_text(id[j]);
  }
  return parts;
}

}  // namespace magic
