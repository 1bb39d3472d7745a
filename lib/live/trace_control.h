// The tracer's control: which trace points are sent, compressed how, every how many steps, and
// whether the stream is paused (docs/tracer.md, "Messages"). A control is data: patterns are
// matched as text and nothing in a message is evaluated.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lib/live/compressor.h"
#include "lib/trace/trace_record.h"

namespace magic {

struct TraceRule {
  // Each set field must match the record (exactly, or as a pattern where '*' is any run of characters).
  std::optional<std::string> kind, phase, order, name, layer;
  // The run the record belongs to (TraceOrigin::run: magic-run's config, magic-check's "clean" or
  // "mutation NAME").
  std::optional<std::string> run;
  int64_t every = 1;  // records of steps with step % every == 0; records of no step always
  CompressorSpec spec;
};

struct TraceControl {
  bool paused = false;
  std::vector<TraceRule> points;
};

constexpr size_t kMaxTraceRules = 64;

// A refused control: the field (a path such as "points[1].grid") and what was expected.
class ControlError : public std::runtime_error {
 public:
  ControlError(std::string field, const std::string& message)
      : std::runtime_error(field + ": " + message), field_(std::move(field)), message_(message) {}
  const std::string& field() const { return field_; }
  const std::string& message() const { return message_; }

 private:
  std::string field_;
  std::string message_;
};

// A client's message: {"type": "control", "paused": ..., "points": [...]}. Throws ControlError.
TraceControl parse_control_message(const std::string& text);
// A control without "type" (--trace-points FILE's contents). Throws ControlError.
TraceControl parse_control(const nlohmann::json& object);
nlohmann::json control_json(const TraceControl& control);

// Loss and clip coefficient whole; scores by their top entries; everything else as statistics.
TraceControl default_control();

// '*' matches any run of characters, every other character itself.
bool pattern_matches(const std::string& pattern, const std::string& text);

// The first rule that matches `record` of run `run`, or nullptr (the record is not sent).
const TraceRule* matching_rule(const TraceControl& control, const TraceRecord& record, const std::string& run = "");
// Whether `rule`'s step filter keeps `record`.
bool due(const TraceRule& rule, const TraceRecord& record);

}  // namespace magic
