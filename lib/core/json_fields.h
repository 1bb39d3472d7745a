// Typed, checked access to a JSON config object. Every error names the source file and the
// dotted field path ("fixtures/runs/demo.json: training.steps: expected an integer, got
// string"); finish() rejects keys nobody read, listing the known ones, so typos never pass.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace magic {

// Parses a JSON file; errors name the file and the parser's position.
nlohmann::json read_json_file(const std::string& path);

class JsonFields {
 public:
  // `source` is the file name used in messages; `path` the dotted prefix ("" at the root).
  JsonFields(const nlohmann::json& object, std::string source, std::string path = "");

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

  // "source: path" for messages about the object as a whole.
  std::string where() const { return path_.empty() ? source_ : source_ + ": " + path_; }
  // The dotted name of `key` for messages ("training.steps").
  std::string field(const std::string& key) const;
  // "source: field: message"
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // Throws if any key was never read.
  void finish() const;

 private:
  const nlohmann::json& get(const std::string& key, const char* expected) const;

  std::shared_ptr<const nlohmann::json> holder_;  // keeps object_or_empty's {} alive
  const nlohmann::json* object_;
  std::string source_;
  std::string path_;
  mutable std::set<std::string> read_;
};

}  // namespace magic
