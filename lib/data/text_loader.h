// Text documents from JSONL (one object per line, the text in a configurable field, or a prompt and
// a completion in two) or from plain text (documents separated by blank lines).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace magic {

struct TextDocument {
  TextDocument() = default;
  TextDocument(std::string id, std::string text, std::string prompt = "")
      : id(std::move(id)), text(std::move(text)), prompt(std::move(prompt)) {}

  std::string id;
  std::string text;    // the text, or the completion of a prompt/completion pair
  std::string prompt;  // the prompt of a pair: its tokens are context and carry no loss
};

// Which JSONL fields a document comes from. A non-empty `prompt` makes documents pairs: the prompt
// from that field and the completion from `text`.
struct DocumentFields {
  std::string text = "text";
  std::string id = "id";
  std::string prompt;
};

// Errors name the file and the 1-based line: malformed JSON, a missing or non-string text (or
// prompt) field, a missing id field (like a missing text field), an id of another type than
// string or integer, a duplicate id (scores join to examples by id). Blank lines are skipped.
// With an empty `fields.id` ids are "file:line".
std::vector<TextDocument> load_jsonl(const std::string& path, const DocumentFields& fields = {});

// Paragraphs separated by one or more blank lines; ids are "file:line" of each first line.
std::vector<TextDocument> load_plain_text(const std::string& path);

// By extension: .jsonl -> load_jsonl, anything else -> load_plain_text (InputError for pairs,
// which plain text cannot hold).
std::vector<TextDocument> load_documents(const std::string& path, const DocumentFields& fields = {});

}  // namespace magic
