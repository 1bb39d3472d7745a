// The tracer's control messages: what is accepted, and that every refusal names its field. A
// control is data: patterns are matched as text.
#include <gtest/gtest.h>

#include "lib/live/trace_control.h"

#include <set>
#include <sstream>

#include "tests/support.h"

namespace magic {
namespace {

std::string refusal(const std::string& text) {
  try {
    parse_control_message(text);
  } catch (const ControlError& e) {
    return e.field();
  }
  return "(accepted)";
}

TEST(TraceControl, AMessageBecomesRulesTriedInOrder) {
  const TraceControl c = parse_control_message(R"({"type": "control", "paused": true, "points": [
      {"kind": "activation", "layer": "blocks.*", "compressor": "tile", "grid": [8, 4], "every": 2},
      {"kind": "score", "compressor": "top", "k": 5},
      {"compressor": "stats"}]})");
  EXPECT_TRUE(c.paused);
  ASSERT_EQ(c.points.size(), 3u);
  TraceRecord block{"blocks.1", "activation", "forward", "forward", 4, "blocks.1", {}};
  const TraceRule* r = matching_rule(c, block);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->spec.kind, Compressor::kTile);
  EXPECT_EQ(r->spec.grid_rows, 8);
  EXPECT_TRUE(due(*r, block));
  block.step = 3;
  EXPECT_FALSE(due(*r, block));
  TraceRecord logits{"logits", "logits", "forward", "forward", 3, "head", {}};
  EXPECT_EQ(matching_rule(c, logits)->spec.kind, Compressor::kStats);
  // The control comes back as it was sent (the file form and the hello message).
  const TraceControl again = parse_control(control_json(c));
  EXPECT_EQ(control_json(again), control_json(c));
}

TEST(TraceControl, ARecordNoRuleMatchesIsNotSentAndStepLessRecordsAlwaysAre) {
  const TraceControl c =
      parse_control_message(R"({"type":"control","points":[{"kind":"loss","compressor":"none","every":7}]})");
  EXPECT_EQ(matching_rule(c, {"blocks.0", "activation", "forward", "forward", 0, "blocks.0", {}}), nullptr);
  const TraceRecord final_scores{"scores", "score", "replay", "metagradient", -1, "", {}};
  const TraceControl all = parse_control_message(R"({"type":"control","points":[{"compressor":"top","every":7}]})");
  EXPECT_TRUE(due(*matching_rule(all, final_scores), final_scores));
}

TEST(TraceControl, EveryRefusalNamesTheField) {
  EXPECT_EQ(refusal("{"), "(message)");
  EXPECT_EQ(refusal("[1, 2]"), "(message)");
  EXPECT_EQ(refusal(R"({"points": []})"), "type");
  EXPECT_EQ(refusal(R"({"type": "hello", "points": []})"), "type");
  EXPECT_EQ(refusal(R"({"type": "control"})"), "points");
  EXPECT_EQ(refusal(R"({"type": "control", "points": {}})"), "points");
  EXPECT_EQ(refusal(R"({"type": "control", "paused": 1, "points": []})"), "paused");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [], "flags": 1})"), "flags");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [3]})"), "points[0]");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"kind": "loss"}]})"), "points[0].compressor");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "zip"}]})"), "points[0].compressor");
  EXPECT_EQ(
      refusal(R"({"type": "control", "points": [{"compressor": "none"}, {"kind": "weights", "compressor": "none"}]})"),
      "points[1].kind");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"phase": 2, "compressor": "none"}]})"), "points[0].phase");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "tile", "grid": [8]}]})"), "points[0].grid");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "tile", "grid": [8, 257]}]})"),
            "points[0].grid[1]");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "stats", "grid": [8, 8]}]})"), "points[0].grid");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "top", "k": 0}]})"), "points[0].k");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "none", "max_elements": 1e9}]})"),
            "points[0].max_elements");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "none", "every": 0}]})"), "points[0].every");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "none", "run": 1}]})"), "points[0].run");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "none", "run": ""}]})"), "points[0].run");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "none", "expr": "__import__"}]})"),
            "points[0].expr");
  std::string many = R"({"type": "control", "points": [)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + R"({"compressor": "empty"})";
  EXPECT_EQ(refusal(many + "]}"), "points");
  EXPECT_EQ(refusal(R"({"type": "control", "points": [{"compressor": "empty"}]})"), "(accepted)");
}

// magic-check streams several runs (the clean one, each mutation's): a rule may pick runs by name.
TEST(TraceControl, ARuleWithARunMatchesTheRecordsOfThatRunOnly) {
  const TraceControl c = parse_control_message(R"({"type": "control", "points": [
      {"run": "mutation *", "kind": "loss", "compressor": "none"},
      {"run": "clean", "compressor": "stats"}]})");
  const TraceRecord loss{"loss", "loss", "forward", "forward", 0, "", {}};
  const TraceRecord grad{"head.weight", "gradient", "backward", "first", 0, "", {}};
  EXPECT_EQ(matching_rule(c, loss, "clean")->spec.kind, Compressor::kStats);
  EXPECT_EQ(matching_rule(c, loss, "mutation missing-reduce")->spec.kind, Compressor::kNone);
  EXPECT_EQ(matching_rule(c, grad, "mutation missing-reduce"), nullptr);
  EXPECT_EQ(matching_rule(c, grad, "fixtures/runs/demo.json"), nullptr);
  EXPECT_EQ(control_json(parse_control(control_json(c))), control_json(c));
  EXPECT_EQ(control_json(c)["points"][1]["run"], "clean");
}

TEST(TraceControl, PatternsMatchAsTextWithStarsOnly) {
  EXPECT_TRUE(pattern_matches("blocks.*", "blocks.1"));
  EXPECT_TRUE(pattern_matches("*.weight", "blocks.0.attn.qkv.weight"));
  EXPECT_TRUE(pattern_matches("*", ""));
  EXPECT_TRUE(pattern_matches("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(pattern_matches("a*b*c", "aXXbYY"));
  EXPECT_FALSE(pattern_matches("blocks.?", "blocks.1"));  // '?' is a character, not a wildcard
  EXPECT_FALSE(pattern_matches("blocks.[0-9]", "blocks.1"));
  // A hostile pattern finishes at once (no exponential backtracking).
  EXPECT_FALSE(pattern_matches(std::string(100, '*') + "b", std::string(10000, 'a')));
}

// docs/tracer.md's examples are what the code reads and writes: its control message (```json) is
// accepted, and each server message (```jsonl, one per line) is JSON of a documented type, whose
// embedded controls parse too.
TEST(TraceControl, TheDocsExamplesAreMessagesTheTracerReadsAndWrites) {
  std::istringstream text(testing::read_file(testing::source_path("docs/tracer.md")));
  std::string block, fence;
  int controls = 0, messages = 0;
  const std::set<std::string> types = {"hello", "history", "record", "dropped", "control", "error", "end"};
  for (std::string line; std::getline(text, line);) {
    if (fence.empty() && (line == "```json" || line == "```jsonl")) {
      fence = line;
      block.clear();
    } else if (!fence.empty() && line.rfind("```", 0) == 0) {
      if (fence == "```json") {
        EXPECT_NO_THROW(parse_control_message(block)) << block;
        ++controls;
      }
      fence.clear();
    } else if (fence == "```jsonl") {
      const nlohmann::json m = nlohmann::json::parse(line);
      EXPECT_TRUE(types.count(m.at("type").get<std::string>())) << line;
      if (m.contains("control")) {
        EXPECT_NO_THROW(parse_control(m["control"])) << line;
      }
      ++messages;
    } else if (!fence.empty()) {
      block += line + "\n";
    }
  }
  EXPECT_GE(controls, 1);
  EXPECT_EQ(messages, 7);
}

TEST(TraceControl, TheDefaultKeepsLossWholeScoresByTheirEndsAndTheRestAsStatistics) {
  const TraceControl c = default_control();
  EXPECT_EQ(matching_rule(c, {"loss", "loss", "forward", "forward", 0, "", {}})->spec.kind, Compressor::kNone);
  EXPECT_EQ(matching_rule(c, {"clip_coefficient", "other", "optimizer", "first", 0, "", {}})->spec.kind,
            Compressor::kNone);
  EXPECT_EQ(matching_rule(c, {"scores", "score", "replay", "metagradient", -1, "", {}})->spec.kind, Compressor::kTop);
  EXPECT_EQ(matching_rule(c, {"tok_emb", "cotangent", "replay", "metagradient", 2, "", {}})->spec.kind,
            Compressor::kStats);
}

}  // namespace
}  // namespace magic
