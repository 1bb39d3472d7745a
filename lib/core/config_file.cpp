#include "lib/core/config_file.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "lib/core/error.h"
#include "lib/core/input_file.h"
#include "lib/core/input_limits.h"
#include "lib/core/json_fields.h"
#include "lib/core/nearest_word.h"
#include "lib/core/strings.h"
#include "lib/core/utf8.h"

namespace magic {
namespace {

using nlohmann::json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A plain (unquoted) YAML scalar as YAML 1.2's core schema reads it.
json plain_scalar(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  char* end = nullptr;
  errno = 0;
  const long long integer = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() + text.size() && errno == 0) return static_cast<int64_t>(integer);
  const double number = std::strtod(text.c_str(), &end);
  if (end == text.c_str() + text.size() && std::isfinite(number) &&
      text.find_first_of("0123456789") != std::string::npos && text.find_first_of("xXpP") == std::string::npos) {
    return number;
  }
  return text;
}

// A YAML document as JSON, within limits::kNesting and limits::kYamlValues: an alias is read again
// at each use, so one that refers to itself, or aliases nested to expand a billion times, stop
// here by name instead of overflowing the stack or the memory.
class YamlReader {
 public:
  explicit YamlReader(std::string path) : path_(std::move(path)) {}

  json read(const YAML::Node& node, int depth = 1) {
    if (depth > limits::kNesting) refuse(node, str_cat("nested deeper than ", limits::kNesting));
    if (++values_ > limits::kYamlValues) {
      refuse(node, str_cat("more than ", limits::kYamlValues, " values once its aliases are expanded"));
    }
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return nullptr;
      case YAML::NodeType::Scalar:
        // A quoted scalar carries the tag "!"; a plain one "?".
        return node.Tag() == "!" ? json(node.Scalar()) : plain_scalar(node.Scalar());
      case YAML::NodeType::Sequence: {
        json out = json::array();
        for (size_t i = 0; i < node.size(); ++i) out.push_back(read(node[i], depth + 1));
        return out;
      }
      case YAML::NodeType::Map: {
        json out = json::object();
        for (const auto& entry : node) {
          if (!entry.first.IsScalar()) refuse(entry.first, "a key must be text");
          const std::string key = entry.first.Scalar();
          if (out.contains(key)) refuse(entry.first, str_cat("key '", one_line_text(key), "' given twice"));
          out[key] = read(entry.second, depth + 1);
        }
        return out;
      }
    }
    return nullptr;
  }

 private:
  [[noreturn]] void refuse(const YAML::Node& at, const std::string& why) const {
    const int line = at.Mark().line;
    throw InputError(str_cat(path_, line >= 0 ? str_cat(": line ", line + 1) : "", ": ", why,
                             " (the bounds on a YAML config: docs/limits.md)"));
  }

  std::string path_;
  int64_t values_ = 0;
};

// A tab in the indentation of line `at` of `text` or the line before (where yaml-cpp reports one,
// often as "illegal map value"), as (line, column), 1-based; (0, 0) if none.
std::pair<int, int> tab_in_indentation(const std::string& text, int at) {
  std::istringstream in(text);
  std::string line;
  for (int number = 1; number <= at && std::getline(in, line); ++number) {
    if (number < at - 1) continue;
    const size_t tab = line.substr(0, line.find_first_not_of(" \t")).find('\t');
    if (tab != std::string::npos) return {number, static_cast<int>(tab) + 1};
  }
  return {0, 0};
}

// The documents of a YAML text, counted by the parser's events, two at most: yaml-cpp 0.7's LoadAll
// never returns on a ',' outside brackets (it yields empty documents without end, until memory
// runs out), so the count is taken here and the one document loaded alone.
class DocumentCounter : public YAML::EventHandler {
 public:
  int documents = 0;
  YAML::Mark second;  // where the second document's first value starts

  void OnDocumentStart(const YAML::Mark&) override { ++documents; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& at, YAML::anchor_t) override { value(at); }
  void OnAlias(const YAML::Mark& at, YAML::anchor_t) override { value(at); }
  void OnScalar(const YAML::Mark& at, const std::string&, YAML::anchor_t, const std::string&) override { value(at); }
  void OnSequenceStart(const YAML::Mark& at, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    value(at);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& at, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    value(at);
  }
  void OnMapEnd() override {}

 private:
  void value(const YAML::Mark& at) {
    if (documents == 2 && !seen_second_) second = at, seen_second_ = true;
  }
  bool seen_second_ = false;
};

// Whether a line of `text` starts with "---" (a document marker).
bool has_document_marker(const std::string& text) {
  return text.rfind("---", 0) == 0 || text.find("\n---") != std::string::npos;
}

json read_yaml(const std::string& path) {
  const std::string text = read_input_file(path, "YAML file", limits::kConfigBytes);
  YAML::Node document;
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentCounter counter;
    if (parser.HandleNextDocument(counter) && parser.HandleNextDocument(counter)) {
      const YAML::Mark at = counter.second;
      // A run config is one document: a second one (after `---`) would otherwise be dropped unread.
      if (has_document_marker(text)) {
        throw InputError(str_cat(path, ": a second YAML document",
                                 at.line >= 0 ? str_cat(" at line ", at.line + 1) : "",
                                 " (after '---'); a run config is one document"));
      }
      throw InputError(str_cat(path, ": invalid YAML at line ", at.line + 1, ", column ", at.column + 1,
                               ": text after the document's end (a ',' outside brackets?)"));
    }
    document = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // its message reads "bad file"
    throw InputError(
        str_cat(path, ": invalid YAML at line ", e.mark.line + 1, ", column ", e.mark.column + 1,
                ": nested deeper than the YAML parser allows (the bounds on a YAML config: docs/limits.md)"));
  } catch (const YAML::ParserException& e) {
    // YAML indents with spaces only; a tab is legal inside values, so it is named only where the
    // parser stopped.
    if (const auto [line, column] = tab_in_indentation(text, e.mark.line + 1); line > 0) {
      throw InputError(str_cat(path, ": invalid YAML at line ", line, ", column ", column,
                               ": a tab in the indentation (YAML indents with spaces only)"));
    }
    throw InputError(str_cat(path, ": invalid YAML at line ", e.mark.line + 1, ", column ", e.mark.column + 1, ": ",
                             quoted_input(e.msg)));
  }
  return YamlReader(path).read(document);
}

// An override's text as YAML reads a scalar (a quoted one is text, without its quotes), or as JSON
// where it starts with [ or {.
json override_value(const ConfigOverride& o) {
  const std::string& v = o.value;
  if (!v.empty() && (v[0] == '[' || v[0] == '{')) {
    require_json_nesting(v, o.flag());
    try {
      return json::parse(v);
    } catch (const json::exception& e) {
      throw InputError(str_cat(o.flag(), ": not valid JSON: ", json_error_text(e)));
    }
  }
  if (v.size() >= 2 && (v[0] == '"' || v[0] == '\'') && v.back() == v[0]) {
    try {
      const YAML::Node node = YAML::Load(v);
      if (node.IsScalar()) return node.Scalar();
    } catch (const YAML::Exception&) {
    }
    throw InputError(str_cat(o.flag(), ": ", v, " is not valid quoted text"));
  }
  return plain_scalar(v);
}

}  // namespace

json read_config_file(const std::string& path) {
  if (ends_with(path, ".yaml") || ends_with(path, ".yml")) return read_yaml(path);
  return read_json_file(path);
}

json apply_overrides(json config, const std::vector<ConfigOverride>& overrides) {
  for (const auto& o : overrides) {
    const std::vector<std::string> keys = split(o.key, '.');
    json* at = &config;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].empty()) throw InputError(str_cat("--", o.key, ": an empty key between dots"));
      if (at->is_null()) *at = json::object();  // a key the config does not have yet
      if (!at->is_object()) {
        throw InputError(str_cat("--", o.key, ": ", join({keys.begin(), keys.begin() + static_cast<long>(i)}, "."),
                                 " is a value, not an object of keys"));
      }
      at = &(*at)[keys[i]];
    }
    *at = override_value(o);
  }
  return config;
}

std::vector<ConfigOverride> parse_overrides(const std::vector<std::string>& extras,
                                            const std::vector<std::string>& top_level_keys) {
  std::vector<ConfigOverride> out;
  for (size_t i = 0; i < extras.size(); ++i) {
    const std::string& word = extras[i];
    const bool flag = word.rfind("--", 0) == 0;
    const size_t equals = word.find('=');
    const std::string key = flag ? word.substr(2, equals == std::string::npos ? std::string::npos : equals - 2) : "";
    const bool top_level = std::find(top_level_keys.begin(), top_level_keys.end(), key) != top_level_keys.end();
    if (!flag || (key.find('.') == std::string::npos && !top_level)) {
      const std::string near = flag ? nearest_word(key, top_level_keys) : "";
      throw InputError(str_cat("unknown argument '", quoted_input(word), "'",
                               near.empty() ? "" : " (did you mean --" + near + "?)",
                               " (a config key is overridden as --section.key VALUE",
                               top_level_keys.empty() ? "" : " or --" + join(top_level_keys, " VALUE, --") + " VALUE",
                               "; run with --help for the flags)"));
    }
    if (equals != std::string::npos) {
      out.push_back({key, word.substr(equals + 1)});
    } else {
      if (i + 1 >= extras.size()) throw InputError(str_cat(word, ": expected a value after it"));
      out.push_back({key, extras[++i]});
    }
  }
  return out;
}

}  // namespace magic
