// Text documents from JSONL (one object per line, the text in a configurable field) or from
// plain text (documents separated by blank lines).
#pragma once

#include <string>
#include <vector>

namespace magic {

struct TextDocument {
  std::string id;
  std::string text;
};

// Errors name the file and the 1-based line: malformed JSON, a missing or non-string text field,
// a missing id field (like a missing text field), an id of another type than string or integer, a
// duplicate id (scores join to examples by id). Blank lines are skipped. With an empty `id_field`
// ids are "file:line".
std::vector<TextDocument> load_jsonl(const std::string& path, const std::string& text_field = "text",
                                     const std::string& id_field = "id");

// Paragraphs separated by one or more blank lines; ids are "file:line" of each first line.
std::vector<TextDocument> load_plain_text(const std::string& path);

// By extension: .jsonl -> load_jsonl, anything else -> load_plain_text.
std::vector<TextDocument> load_documents(const std::string& path, const std::string& text_field = "text",
                                         const std::string& id_field = "id");

}  // namespace magic
