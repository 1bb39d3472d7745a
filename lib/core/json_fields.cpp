#include "lib/core/json_fields.h"

#include <algorithm>
#include <cmath>

#include "lib/core/error.h"
#include "lib/core/input_file.h"
#include "lib/core/input_limits.h"
#include "lib/core/nearest_word.h"
#include "lib/core/strings.h"
#include "lib/core/utf8.h"

namespace magic {
namespace {

std::string type_name(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number()) return "number";
  return value.type_name();
}

std::string line_and_column(const std::string& text, size_t byte) {
  // nlohmann's byte is 1-based and points just past the character it stopped at.
  const size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return str_cat("line ", line, ", column ", column);
}

// The input to blame for an unknown key: the flag that set exactly it is named by its key alone
// (its value is not the fault), a flag that set an object above it as given.
std::string flag_of_key(const ConfigOverride& flag, const std::string& field) {
  return flag.key == field ? "--" + flag.key : flag.flag();
}

}  // namespace

void require_json_nesting(const std::string& text, const std::string& where) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits::kNesting) {
        throw InputError(str_cat(where, ": nested deeper than ", limits::kNesting, " at ", line_and_column(text, i + 1),
                                 " (the bound on nesting: docs/limits.md)"));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json read_json_file(const std::string& path, int64_t max_bytes) {
  const std::string text = read_input_file(path, "JSON file", max_bytes < 0 ? limits::kConfigBytes : max_bytes);
  require_json_nesting(text, path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(str_cat(path, ": invalid JSON at ", line_and_column(text, e.byte), ": ", json_error_text(e)));
  } catch (const nlohmann::json::exception& e) {  // a number past a double's range (out_of_range.406)
    throw InputError(str_cat(path, ": invalid JSON: ", json_error_text(e)));
  }
}

std::string json_error_text(const nlohmann::json::exception& e) {
  // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ...": what
  // follows the first ": " (a parse error names its position there), else what follows the tag.
  std::string why = e.what();
  if (const size_t colon = why.find(": ");
      colon != std::string::npos && why.rfind("[json.exception.parse_error", 0) == 0) {
    why = why.substr(colon + 2);
  } else if (const size_t tag = why.find("] "); tag != std::string::npos) {
    why = why.substr(tag + 2);
  }
  return quoted_input(why, 200);
}

namespace {

// A value from the input, for a message: escaped and cut (quoted_input), never a raw byte.
std::string shown(const nlohmann::json& value) {
  return quoted_input(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

JsonFields::JsonFields(const nlohmann::json& object, std::string source, std::string path)
    : JsonFields(object, std::make_shared<const ValueSources>(std::move(source)), std::move(path)) {}

JsonFields::JsonFields(const nlohmann::json& object, std::shared_ptr<const ValueSources> sources, std::string path)
    : object_(&object), sources_(std::move(sources)), path_(std::move(path)) {
  if (!object.is_object()) {
    throw InputError(str_cat(path_.empty() ? sources_->value("") + ": top level" : sources_->value(path_),
                             ": expected an object, got ", type_name(object)));
  }
}

std::string JsonFields::field(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void JsonFields::fail(const std::string& key, const std::string& message) const {
  throw InputError(str_cat(where(key), ": ", message));
}

std::string JsonFields::object_name() const {
  return path_.empty() ? "the top level" : path_;
}

std::string JsonFields::misspelling_of(const std::string& key) const {
  for (const auto& item : object_->items()) {
    if (!read_.count(item.key()) && nearest_word(item.key(), {key}) == key) return item.key();
  }
  return "";
}

bool JsonFields::has(const std::string& key) const {
  return object_->contains(key);
}

const nlohmann::json& JsonFields::get(const std::string& key, const char* expected) const {
  read_.insert(key);
  auto it = object_->find(key);
  if (it == object_->end()) {
    // A required key is often missing because it is misspelt: name the misspelling beside it.
    const std::string meant = misspelling_of(key);
    if (meant.empty()) fail(key, str_cat("missing; expected ", expected));
    const ConfigOverride* flag = sources_->override_of(field(meant));
    const std::string unknown = flag == nullptr
                                    ? str_cat(object_name(), " has an unknown key '", quoted_input(meant), "'")
                                    : str_cat(flag_of_key(*flag, field(meant)), " gives ", object_name(),
                                              " an unknown key '", quoted_input(meant), "'");
    throw InputError(str_cat(where(key), " is missing; ", unknown, " (did you mean ", key, "?)"));
  }
  return *it;
}

int64_t JsonFields::integer(const std::string& key) const {
  const auto& value = get(key, "an integer");
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail(key, str_cat("expected an integer below 2^63, got ", shown(value)));
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::floor(d) == d && std::abs(d) < 9e15) return static_cast<int64_t>(d);
  }
  fail(key, str_cat("expected an integer, got ", type_name(value), " ", shown(value)));
}

int64_t JsonFields::integer(const std::string& key, int64_t fallback) const {
  read_.insert(key);
  return has(key) ? integer(key) : fallback;
}

double JsonFields::number(const std::string& key) const {
  const auto& value = get(key, "a number");
  if (!value.is_number()) fail(key, str_cat("expected a number, got ", type_name(value), " ", shown(value)));
  return value.get<double>();
}

double JsonFields::number(const std::string& key, double fallback) const {
  read_.insert(key);
  return has(key) ? number(key) : fallback;
}

std::string JsonFields::string(const std::string& key) const {
  const auto& value = get(key, "a string");
  if (!value.is_string()) fail(key, str_cat("expected a string, got ", type_name(value), " ", shown(value)));
  return value.get<std::string>();
}

std::string JsonFields::string(const std::string& key, const std::string& fallback) const {
  read_.insert(key);
  return has(key) ? string(key) : fallback;
}

nlohmann::json JsonFields::raw(const std::string& key, const nlohmann::json& fallback) const {
  read_.insert(key);
  return has(key) ? (*object_)[key] : fallback;
}

std::optional<std::string> JsonFields::optional_string(const std::string& key) const {
  read_.insert(key);
  if (!has(key) || (*object_)[key].is_null()) return std::nullopt;
  return string(key);
}

bool JsonFields::boolean(const std::string& key, bool fallback) const {
  read_.insert(key);
  if (!has(key)) return fallback;
  const auto& value = (*object_)[key];
  if (!value.is_boolean()) fail(key, str_cat("expected true or false, got ", type_name(value), " ", shown(value)));
  return value.get<bool>();
}

std::vector<double> JsonFields::numbers(const std::string& key) const {
  const auto& value = get(key, "an array of numbers");
  if (!value.is_array()) fail(key, str_cat("expected an array of numbers, got ", type_name(value)));
  std::vector<double> out;
  for (const auto& item : value) {
    if (!item.is_number()) fail(key, str_cat("expected an array of numbers, found ", shown(item)));
    out.push_back(item.get<double>());
  }
  return out;
}

JsonFields JsonFields::object(const std::string& key) const {
  return JsonFields(get(key, "an object"), sources_, field(key));
}

JsonFields JsonFields::object_or_empty(const std::string& key) const {
  read_.insert(key);
  if (has(key)) return object(key);
  auto empty = std::make_shared<const nlohmann::json>(nlohmann::json::object());
  JsonFields fields(*empty, sources_, field(key));
  fields.holder_ = empty;
  return fields;
}

void JsonFields::finish() const {
  std::vector<std::string> unknown;
  for (const auto& item : object_->items()) {
    if (!read_.count(item.key())) unknown.push_back(item.key());
  }
  if (unknown.empty()) return;
  const std::vector<std::string> known(read_.begin(), read_.end());
  const std::string place = path_.empty() ? "at the top level" : "in " + path_;
  // "unknown key 'shufle' in training (did you mean shuffle?)"; the known keys where some unknown
  // key is near none of them.
  const auto message = [&](const std::vector<std::string>& keys) {
    std::vector<std::string> listed;
    bool all_near = true;
    for (const std::string& key : keys) {
      const std::string near = nearest_word(key, known);
      all_near = all_near && !near.empty();
      const std::string hint = near.empty() ? "" : " (did you mean " + near + "?)";
      listed.push_back(keys.size() == 1 ? str_cat("unknown key '", quoted_input(key), "' ", place, hint)
                                        : str_cat("'", quoted_input(key), "'", hint));
    }
    const std::string what = keys.size() == 1 ? listed[0] : str_cat("unknown keys ", place, ": ", join(listed, ", "));
    return all_near ? what : str_cat(what, "; known keys: ", join(known, ", "));
  };
  // A key an override set is what the user typed last: name its flag.
  for (const std::string& key : unknown) {
    if (const ConfigOverride* flag = sources_->override_of(field(key))) {
      throw InputError(str_cat(flag_of_key(*flag, field(key)), ": ", message({key})));
    }
  }
  throw InputError(str_cat(sources_->file(), ": ", message(unknown)));
}

}  // namespace magic
