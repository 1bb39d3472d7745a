#include "lib/live/trace_control.h"

#include <set>

#include "lib/core/error.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"

namespace magic {
namespace {

using nlohmann::json;

const std::set<std::string>& rule_keys() {
  static const std::set<std::string> keys = {"kind",  "phase",      "order",        "name", "layer", "run",
                                             "every", "compressor", "max_elements", "grid", "k"};
  return keys;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// An integer in [lo, hi], or ControlError naming `field`.
int64_t bounded_integer(const json& value, const std::string& field, int64_t lo, int64_t hi) {
  if (!value.is_number_integer()) throw ControlError(field, str_cat("expected an integer from ", lo, " to ", hi));
  const int64_t v = value.get<int64_t>();
  if (v < lo || v > hi) throw ControlError(field, str_cat("expected an integer from ", lo, " to ", hi, ", got ", v));
  return v;
}

std::string text_field(const json& value, const std::string& field) {
  if (!value.is_string()) throw ControlError(field, "expected a string");
  const std::string s = value.get<std::string>();
  if (s.empty() || s.size() > 200) throw ControlError(field, "expected a string of 1 to 200 characters");
  return s;
}

// A closed-vocabulary field (kind, phase, order) may be a pattern too, but one that can match.
std::string vocabulary_field(const json& value, const std::string& field, const std::vector<std::string>& words) {
  const std::string s = text_field(value, field);
  for (const std::string& w : words) {
    if (pattern_matches(s, w)) return s;
  }
  throw ControlError(field,
                     str_cat("expected one of ", joined(words), " (or a pattern matching one), got \"", s, "\""));
}

TraceRule parse_rule(const json& j, const std::string& at) {
  if (!j.is_object()) throw ControlError(at, "expected an object");
  for (const auto& item : j.items()) {
    if (!rule_keys().count(item.key())) {
      throw ControlError(
          at + "." + item.key(),
          "unknown field (known: kind, phase, order, name, layer, run, every, compressor, max_elements, grid, k)");
    }
  }
  TraceRule rule;
  if (j.contains("kind")) rule.kind = vocabulary_field(j["kind"], at + ".kind", trace_kinds());
  if (j.contains("phase")) rule.phase = vocabulary_field(j["phase"], at + ".phase", trace_phases());
  if (j.contains("order")) rule.order = vocabulary_field(j["order"], at + ".order", trace_orders());
  if (j.contains("name")) rule.name = text_field(j["name"], at + ".name");
  if (j.contains("layer")) rule.layer = text_field(j["layer"], at + ".layer");
  if (j.contains("run")) rule.run = text_field(j["run"], at + ".run");
  if (j.contains("every")) rule.every = bounded_integer(j["every"], at + ".every", 1, 1000000);
  if (!j.contains("compressor")) throw ControlError(at + ".compressor", "missing (one of " + compressor_names() + ")");
  const std::string name = text_field(j["compressor"], at + ".compressor");
  const std::optional<Compressor> c = parse_compressor(name);
  if (!c) throw ControlError(at + ".compressor", "expected one of " + compressor_names() + ", got \"" + name + "\"");
  rule.spec.kind = *c;
  const auto only_for = [&](const char* key, Compressor owner) {
    if (j.contains(key) && rule.spec.kind != owner) {
      throw ControlError(at + "." + key, "applies to compressor " + compressor_name(owner) + " only");
    }
    return j.contains(key);
  };
  if (only_for("max_elements", Compressor::kNone)) {
    rule.spec.max_elements = bounded_integer(j["max_elements"], at + ".max_elements", 1, kMaxNoneElements);
  }
  if (only_for("grid", Compressor::kTile)) {
    const json& g = j["grid"];
    const std::string expected = str_cat("expected two integers from 1 to ", kMaxGrid, " ([rows, columns])");
    if (!g.is_array() || g.size() != 2) throw ControlError(at + ".grid", expected);
    rule.spec.grid_rows = bounded_integer(g[0], at + ".grid[0]", 1, kMaxGrid);
    rule.spec.grid_cols = bounded_integer(g[1], at + ".grid[1]", 1, kMaxGrid);
  }
  if (only_for("k", Compressor::kTop)) rule.spec.k = bounded_integer(j["k"], at + ".k", 1, kMaxTopK);
  return rule;
}

TraceControl parse_fields(const json& j, bool message) {
  if (!j.is_object()) throw ControlError("(message)", "expected a JSON object");
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (k != "paused" && k != "points" && !(message && k == "type")) {
      throw ControlError(
          k, message ? "unknown field (known: type, paused, points)" : "unknown field (known: paused, points)");
    }
  }
  TraceControl control;
  if (j.contains("paused")) {
    if (!j["paused"].is_boolean()) throw ControlError("paused", "expected true or false");
    control.paused = j["paused"].get<bool>();
  }
  if (!j.contains("points")) throw ControlError("points", "missing (a list of rules)");
  const json& points = j["points"];
  if (!points.is_array()) throw ControlError("points", "expected a list of rules");
  if (points.size() > kMaxTraceRules) {
    throw ControlError("points", str_cat("expected at most ", kMaxTraceRules, " rules, got ", points.size()));
  }
  for (size_t i = 0; i < points.size(); ++i)
    control.points.push_back(parse_rule(points[i], str_cat("points[", i, "]")));
  return control;
}

json rule_json(const TraceRule& r) {
  json j = json::object();
  const auto put = [&](const char* key, const std::optional<std::string>& v) {
    if (v) j[key] = *v;
  };
  put("kind", r.kind);
  put("phase", r.phase);
  put("order", r.order);
  put("name", r.name);
  put("layer", r.layer);
  put("run", r.run);
  if (r.every != 1) j["every"] = r.every;
  j["compressor"] = compressor_name(r.spec.kind);
  if (r.spec.kind == Compressor::kNone) j["max_elements"] = r.spec.max_elements;
  if (r.spec.kind == Compressor::kTile) j["grid"] = {r.spec.grid_rows, r.spec.grid_cols};
  if (r.spec.kind == Compressor::kTop) j["k"] = r.spec.k;
  return j;
}

bool field_matches(const std::optional<std::string>& pattern, const std::string& value) {
  return !pattern || pattern_matches(*pattern, value);
}

}  // namespace

TraceControl parse_control_message(const std::string& text) {
  try {
    require_json_nesting(text, "a control message");
  } catch (const InputError& e) {
    throw ControlError("(message)", e.what());
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw ControlError("(message)", "not valid JSON: " + json_error_text(e));
  }
  if (!j.is_object()) throw ControlError("(message)", "expected a JSON object");
  if (!j.contains("type")) throw ControlError("type", "missing (\"control\")");
  if (!j["type"].is_string() || j["type"].get<std::string>() != "control") {
    throw ControlError("type", "expected \"control\" (the one message a client sends)");
  }
  return parse_fields(j, /*message=*/true);
}

TraceControl parse_control(const nlohmann::json& object) {
  return parse_fields(object, /*message=*/false);
}

nlohmann::json control_json(const TraceControl& control) {
  json points = json::array();
  for (const TraceRule& r : control.points) points.push_back(rule_json(r));
  return {{"paused", control.paused}, {"points", points}};
}

TraceControl default_control() {
  TraceControl c;
  const auto rule = [](std::optional<std::string> kind, std::optional<std::string> name, Compressor kind_of) {
    TraceRule r;
    r.kind = std::move(kind);
    r.name = std::move(name);
    r.spec.kind = kind_of;
    return r;
  };
  c.points.push_back(rule("loss", std::nullopt, Compressor::kNone));
  c.points.push_back(rule("other", std::string("clip_coefficient"), Compressor::kNone));
  c.points.push_back(rule("score", std::nullopt, Compressor::kTop));
  c.points.push_back(rule(std::nullopt, std::nullopt, Compressor::kStats));
  return c;
}

bool pattern_matches(const std::string& pattern, const std::string& text) {
  // Iterative glob with one backtrack point: linear-ish, no recursion for a hostile pattern.
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

const TraceRule* matching_rule(const TraceControl& control, const TraceRecord& record, const std::string& run) {
  for (const TraceRule& r : control.points) {
    if (field_matches(r.kind, record.kind) && field_matches(r.phase, record.phase) &&
        field_matches(r.order, record.order) && field_matches(r.name, record.name) &&
        field_matches(r.layer, record.layer) && field_matches(r.run, run)) {
      return &r;
    }
  }
  return nullptr;
}

bool due(const TraceRule& rule, const TraceRecord& record) {
  return record.step < 0 || record.step % rule.every == 0;
}

}  // namespace magic
