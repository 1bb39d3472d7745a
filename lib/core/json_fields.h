// Typed, checked access to a JSON config object. Every error names the input that gave the value
// and its dotted field path ("fixtures/runs/demo.json: training.steps: expected an integer, got
// string"; "--training.steps=x: ..." where a command-line override set it: value_sources.h);
// finish() rejects keys nobody read, suggesting the nearest known one, so typos never pass.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/core/value_sources.h"

namespace magic {

// Parses a JSON file (a regular file within limits::kConfigBytes, or `max_bytes`, nested no deeper
// than limits::kNesting); errors name the file and the parser's position.
nlohmann::json read_json_file(const std::string& path, int64_t max_bytes = -1);

// What a JSON parser's exception says, for a message: its "[json.exception...]" tag and the
// position it repeats dropped, the input's bytes it quotes escaped (quoted_input).
std::string json_error_text(const nlohmann::json::exception& e);

// InputError "WHERE: nested deeper than 128 at line L, column C" where JSON text opens more arrays
// and objects at once than limits::kNesting, checked before a parser recurses or a value is
// printed (both follow the depth). Brackets inside strings do not count.
void require_json_nesting(const std::string& text, const std::string& where);

class JsonFields {
 public:
  // `source` is the file name used in messages; `path` the dotted prefix ("" at the root).
  JsonFields(const nlohmann::json& object, std::string source, std::string path = "");
  // A config whose values may come from the file or from overrides: messages name their input.
  JsonFields(const nlohmann::json& object, std::shared_ptr<const ValueSources> sources, std::string path = "");

  bool has(const std::string& key) const;

  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  double number(const std::string& key) const;
  double number(const std::string& key, double fallback) const;
  std::string string(const std::string& key) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::vector<double> numbers(const std::string& key) const;
  std::optional<std::string> optional_string(const std::string& key) const;
  JsonFields object(const std::string& key) const;
  // The value as it is (for fields with more than one form), or `fallback` when absent.
  nlohmann::json raw(const std::string& key, const nlohmann::json& fallback) const;
  // An absent object reads as {} so defaults apply.
  JsonFields object_or_empty(const std::string& key) const;

  // "source: path" for messages about the object as a whole (with the overrides that set keys in it).
  std::string where() const { return sources_->object(path_); }
  // "source: field" for messages about the value at `key`, or the override that set it.
  std::string where(const std::string& key) const { return sources_->value(field(key)); }
  // The dotted name of `key` for messages ("training.steps").
  std::string field(const std::string& key) const;
  // "where(key): message"
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // Throws if any key was never read, naming the input that gave it and the nearest known key.
  void finish() const;

 private:
  const nlohmann::json& get(const std::string& key, const char* expected) const;
  // "training", or "the top level".
  std::string object_name() const;
  // An unread key near `key`, missing: what the user likely meant by it ("" if none).
  std::string misspelling_of(const std::string& key) const;

  std::shared_ptr<const nlohmann::json> holder_;  // keeps object_or_empty's {} alive
  const nlohmann::json* object_;
  std::shared_ptr<const ValueSources> sources_;
  std::string path_;
  mutable std::set<std::string> read_;
};

}  // namespace magic
