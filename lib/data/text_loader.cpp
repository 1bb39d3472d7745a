#include "lib/data/text_loader.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "lib/core/error.h"
#include "lib/core/input_file.h"
#include "lib/core/input_limits.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"
#include "lib/core/utf8.h"

namespace magic {
namespace {

// A data file is a regular file: /dev/zero or a pipe would be read without end.
std::ifstream open_text(const std::string& path) {
  require_regular_file(path, "data file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(str_cat(path, ": cannot open data file"));
  return in;
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

std::string string_field(const nlohmann::json& object, const std::string& field, const std::string& where,
                         const std::string& what) {
  auto value = object.find(field);
  if (value == object.end()) throw InputError(str_cat(where, ": missing ", what, " field '", field, "'"));
  if (!value->is_string()) {
    throw InputError(str_cat(where, ": field '", field, "' must be a string, got ", value->type_name()));
  }
  return value->get<std::string>();
}

// The line around `at` (about 60 bytes) with the bytes that are not UTF-8, and control characters,
// as \xNN: enough to find the place in an editor, and safe to print.
std::string excerpt(const std::string& line, size_t at) {
  constexpr size_t kSide = 30;
  size_t begin = at > kSide ? at - kSide : 0, end = std::min(line.size(), at + kSide);
  while (begin > 0 && (static_cast<unsigned char>(line[begin]) & 0xC0) == 0x80) --begin;  // a character's start
  while (end < line.size() && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) ++end;
  std::string shown;
  for (char c : printable_text(line.substr(begin, end - begin))) {
    shown += static_cast<unsigned char>(c) < 0x20 ? byte_escape(static_cast<unsigned char>(c)) : std::string(1, c);
  }
  return str_cat(begin > 0 ? "..." : "", shown, end < line.size() ? "..." : "");
}

// The bytes from `at` that are not UTF-8, as \xNN (at most 4).
std::string bad_bytes(const std::string& line, size_t at) {
  size_t end = at;
  while (end < line.size() && end < at + 4 && utf8_sequence_length(line, end) == 0) ++end;
  return printable_text(line.substr(at, end - at));
}

// JSON Lines are UTF-8 (RFC 8259): a line that is not is refused naming the place, before the JSON
// parser, whose message would echo the raw byte.
void require_utf8(const std::string& line, const std::string& where, int64_t line_offset) {
  const size_t bad = first_invalid_utf8(line);
  if (bad == std::string::npos) return;
  throw InputError(str_cat(where, ": not valid UTF-8 at column ", bad + 1, " (byte offset ",
                           line_offset + static_cast<int64_t>(bad), " in the file): ", bad_bytes(line, bad), " in ",
                           excerpt(line, bad), "; expected UTF-8 text"));
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ...",
// as "at column 5: syntax error ...": the line is named already, the library's tag says nothing.
std::string parse_failure(const nlohmann::json::parse_error& e) {
  return str_cat("at column ", e.byte, ": ", json_error_text(e));
}

}  // namespace

std::vector<TextDocument> load_jsonl(const std::string& path, const DocumentFields& fields) {
  const std::string& id_field = fields.id;
  std::ifstream in = open_text(path);
  std::vector<TextDocument> docs;
  std::map<std::string, int64_t> lines_of_ids;
  std::string line;
  int64_t offset = 0;  // of the line in the file
  for (int64_t number = 1; read_bounded_line(in, line, limits::kLineBytes, path, number);
       ++number, offset += static_cast<int64_t>(line.size()) + 1) {
    if (is_blank(line)) continue;
    const std::string where = str_cat(path, ":", number);
    require_utf8(line, where, offset);
    require_json_nesting(line, where);
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(str_cat(where, ": malformed JSON line ", parse_failure(e)));
    } catch (const nlohmann::json::exception& e) {  // a number past a double's range
      throw InputError(str_cat(where, ": malformed JSON line: ", json_error_text(e)));
    }
    if (!object.is_object()) throw InputError(str_cat(where, ": expected a JSON object, got ", object.type_name()));
    const bool pair = !fields.prompt.empty();
    TextDocument doc{where, string_field(object, fields.text, where, pair ? "completion" : "text"), ""};
    if (pair) doc.prompt = string_field(object, fields.prompt, where, "prompt");
    if (!id_field.empty()) {
      auto id = object.find(id_field);
      if (id == object.end()) {
        throw InputError(str_cat(where, ": missing id field '", id_field,
                                 "' (set \"id_field\": \"\" to name documents by file and line)"));
      }
      if (!id->is_string() && !id->is_number_integer()) {
        throw InputError(
            str_cat(where, ": field '", id_field, "' must be a string or an integer, got ", id->type_name()));
      }
      doc.id = id->is_string() ? id->get<std::string>() : id->dump();
      const auto [seen, fresh] = lines_of_ids.emplace(doc.id, number);
      if (!fresh) {
        throw InputError(str_cat(where, ": duplicate id '", doc.id, "' (first on line ", seen->second,
                                 "); ids must be unique to join scores to examples"));
      }
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

std::vector<TextDocument> load_plain_text(const std::string& path) {
  std::ifstream in = open_text(path);
  std::vector<TextDocument> docs;
  std::string line;
  TextDocument current;
  auto flush = [&] {
    if (!current.text.empty()) docs.push_back(std::move(current));
    current = TextDocument{};
  };
  for (int64_t number = 1; read_bounded_line(in, line, limits::kLineBytes, path, number); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) {
      flush();
      continue;
    }
    if (current.text.empty()) {
      current.id = str_cat(path, ":", number);
    } else {
      current.text += '\n';
    }
    current.text += line;
  }
  flush();
  return docs;
}

std::vector<TextDocument> load_documents(const std::string& path, const DocumentFields& fields) {
  const std::string suffix = ".jsonl";
  if (path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return load_jsonl(path, fields);
  }
  if (!fields.prompt.empty()) {
    throw InputError(str_cat(path, ": prompt/completion pairs need a .jsonl file (plain text holds only texts)"));
  }
  return load_plain_text(path);
}

}  // namespace magic
