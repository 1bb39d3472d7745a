#include "lib/train/attribution_text.h"

#include "lib/core/strings.h"
#include "lib/core/utf8.h"

namespace magic {

std::string snippet(const std::string& text, size_t width) {
  if (text.size() <= width) return one_line_text(text);
  size_t cut = width - 3;
  // Not inside a character: back to the start of a valid sequence the cut would split.
  for (size_t back = 1; back <= 3 && back <= cut; ++back) {
    if (utf8_sequence_length(text, cut - back) > back) {
      cut -= back;
      break;
    }
  }
  return one_line_text(text.substr(0, cut)) + "...";
}

std::string examples_summary(const TokenDataset& data, const std::string& path) {
  std::string line = str_cat(data.size(), " examples from ", path);
  if (data.packed) return str_cat(line, " (", data.documents, " documents packed into rows of ", data.max_len(), ")");
  if (data.split_documents == 0 && data.dropped_documents == 0 && data.truncated_documents == 0) {
    return line;  // one example a document
  }
  std::vector<std::string> parts = {str_cat(data.documents, " documents")};
  if (data.split_documents > 0) {
    parts.push_back(str_cat(data.split_documents, " split into chunks of max_len ", data.max_len()));
  }
  if (data.truncated_documents > 0) {
    parts.push_back(str_cat(data.truncated_documents, " truncated to max_len ", data.max_len()));
  }
  if (data.dropped_documents > 0) parts.push_back(str_cat(data.dropped_documents, " with nothing to predict"));
  return line + " (" + join(parts, ", ") + ")";
}

std::string ranking_note(const LmProblem& problem, int64_t query, bool chosen, const std::string& scores_file) {
  const auto queries = static_cast<int64_t>(problem.query_documents.size());
  const TextDocument& q = problem.query_documents.at(static_cast<size_t>(query));
  std::string note = str_cat("Ranked by query ", query, " (", one_line_text(q.id), ": ", snippet(q.text, 40), ")");
  if (!chosen) note += str_cat(", the first of ", queries, " (no --query given)");
  if (queries > 1) note += str_cat("; --query N (0 to ", queries - 1, ") picks another");
  note += scores_file.empty() ? str_cat("; --out DIR writes all ", queries, " queries' scores")
                              : str_cat("; ", scores_file, " holds all ", queries);
  return note + ".";
}

}  // namespace magic
