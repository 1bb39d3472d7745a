#include "lib/data/token_dataset.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/model/lm_loss.h"

namespace magic {

TokenDataset tokenize_documents(const std::vector<TextDocument>& documents, const DocumentTokenizer& tokenizer,
                                int64_t max_len, const std::string& source) {
  if (max_len < 2) {
    throw InputError(str_cat(source, ": max_len must be >= 2 (a token and the token it predicts), got ", max_len));
  }
  std::vector<std::vector<int64_t>> chunks;
  TokenDataset data;
  data.documents = static_cast<int64_t>(documents.size());
  for (size_t d = 0; d < documents.size(); ++d) {
    const auto tokens = tokenizer.encode_document(documents[d].text, str_cat(source, ": '", documents[d].id, "'"));
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t pieces = (n + max_len - 1) / max_len;
    const size_t examples_before = data.examples.size();
    for (int64_t k = 0; k < pieces; ++k) {
      const int64_t begin = k * max_len, end = std::min(n, begin + max_len);
      if (end - begin < 2) continue;
      chunks.emplace_back(tokens.begin() + begin, tokens.begin() + end);
      std::string id = pieces > 1 ? str_cat(documents[d].id, "#", k) : documents[d].id;
      data.examples.push_back({id, static_cast<int64_t>(d), end - begin, begin});
    }
    if (pieces > 1) ++data.split_documents;
    if (data.examples.size() == examples_before) ++data.dropped_documents;
  }
  if (chunks.empty()) throw InputError(str_cat(source, ": no document yields an example of >= 2 tokens"));
  const auto N = static_cast<int64_t>(chunks.size());
  data.pad_id = tokenizer.pad_id();
  data.input_ids = at::full({N, max_len}, data.pad_id, at::kLong);
  data.labels = at::full({N, max_len}, kIgnoreLabel, at::kLong);
  auto ids = data.input_ids.accessor<int64_t, 2>();
  auto labels = data.labels.accessor<int64_t, 2>();
  for (int64_t i = 0; i < N; ++i) {
    for (size_t j = 0; j < chunks[i].size(); ++j) {
      ids[i][j] = chunks[i][j];
      labels[i][j] = chunks[i][j];
    }
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

}  // namespace magic
