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

std::string pair_text(const std::string& prompt, const std::string& completion) {
  if (prompt.empty()) return completion;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  return prompt + (space(prompt.back()) ? "" : " ") + "\u21D2" +
         (!completion.empty() && space(completion.front()) ? "" : " ") + completion;
}

std::string parts_text(const std::vector<TextPart>& parts) {
  std::string text;
  for (size_t k = 0; k < parts.size(); ++k) {
    text = !parts[k].prompt && k > 0 && parts[k - 1].prompt ? pair_text(text, parts[k].text) : text + parts[k].text;
  }
  return text;
}

std::string model_summary(const RunConfig& config, const GptConfig& m) {
  const std::string shape = str_cat(
      m.n_layers, m.n_layers == 1 ? " layer" : " layers", ", d_model ", m.d_model, ", ", m.n_heads, " heads, vocab ",
      m.vocab, ", ", m.positions == Positions::kRotary ? "rotary" : "learned", " positions, sequences of ", m.max_len);
  if (config.model_folder) return str_cat(*config.model_folder, " (", shape, ")");
  return str_cat("GPT from the config (", shape, ")",
                 config.model_init ? str_cat(", initial weights from ", *config.model_init) : std::string());
}

std::string data_format_summary(const RunConfig& config) {
  const DocumentFields& f = config.fields;
  const std::string format = f.prompt.empty() ? str_cat("text (field ", f.text, ")")
                                              : str_cat("prompt_completion (fields ", f.prompt, ", ", f.text, ")");
  return str_cat(format, ", fit ", fit_name(config.fit));
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
  std::string note = str_cat("Ranked by query ", query, " (", one_line_text(q.id), ": ",
                             snippet(pair_text(q.prompt, q.text), 40), ")");
  if (!chosen) note += str_cat(", the first of ", queries, " (no --query given)");
  if (queries > 1) note += str_cat("; --query N (0 to ", queries - 1, ") picks another");
  note += scores_file.empty() ? str_cat("; --out DIR writes all ", queries, " queries' scores")
                              : str_cat("; ", scores_file, " holds all ", queries);
  return note + ".";
}

}  // namespace magic
