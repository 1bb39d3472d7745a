// --explain-layout of magic-check and magic-run: the documented example (docs/magic-check.md,
// "Explaining a layout") is the tool's output, byte for byte, from both tools; every rank's groups
// in it are derived again here from the documented rules alone; bad layouts are refused first.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "lib/core/strings.h"
#include "tests/support.h"
#include "tests/tool_refusals.h"

namespace magic {
namespace {

const std::string kExample = "dp=4,cp=2,tp=2,fsdp=2";

testing::CommandOutcome magic_check(const std::string& args) {
  return testing::run_command(std::string(MAGIC_CHECK_BINARY) + " " + args);
}

// The lines shown under "$ magic-check --topology <kExample> --explain-layout" in the docs.
std::string documented_example() {
  return testing::documented_output("docs/magic-check.md",
                                    "$ magic-check --topology " + kExample + " --explain-layout");
}

std::vector<int> ranks_of(const std::string& list) {
  std::vector<int> ranks;
  for (const std::string& r : split(list, ',')) ranks.push_back(std::stoi(r));
  return ranks;
}

TEST(ExplainLayout, TheDocumentedExampleIsWhatBothToolsPrint) {
  const std::string shown = documented_example();
  ASSERT_NE(shown, "") << "docs/magic-check.md lost its --explain-layout example";
  const testing::CommandOutcome check = magic_check("--topology " + kExample + " --explain-layout");
  ASSERT_EQ(check.exit_code, 0) << check.output;
  EXPECT_EQ(check.output, shown);
  const testing::CommandOutcome run = testing::magic_run("--config " + testing::write_tiny_run_config("explain", {}) +
                                                         " --topology " + kExample + " --explain-layout");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, shown);
}

// The table's groups, derived from each rank's coordinates by the rules the docs state (not by
// MeshLayout): rank = (d*cp + c)*tp + t; tp: same d, c; cp: same d, t; shard: same d/fsdp, c, t;
// replica: same d%fsdp, t; batch: same t.
TEST(ExplainLayout, EveryRanksGroupsFollowTheDocumentedRules) {
  const int64_t dp = 4, cp = 2, tp = 2, fsdp = 2;
  const testing::CommandOutcome o = magic_check("--topology " + kExample + " --explain-layout");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  struct Row {
    int64_t rank, d, c, t, shard;
    std::vector<std::vector<int>> groups;  // tp, cp, shard, replica, batch
  };
  std::vector<Row> rows;
  bool in_table = false;
  for (const std::string& line : split(o.output, '\n')) {
    if (line.rfind("rank  ", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table || line.empty()) continue;
    std::istringstream words(line);
    Row r;
    words >> r.rank >> r.d >> r.c >> r.t >> r.shard;
    for (std::string list; words >> list;) r.groups.push_back(ranks_of(list));
    ASSERT_EQ(r.groups.size(), 5u) << line;
    rows.push_back(r);
  }
  ASSERT_EQ(static_cast<int64_t>(rows.size()), dp * cp * tp) << o.output;
  const auto members = [&](const Row& me, auto same) {
    std::vector<int> m;
    for (const Row& r : rows) {
      if (same(me, r)) m.push_back(static_cast<int>(r.rank));
    }
    return m;
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& me = rows[i];
    EXPECT_EQ(me.rank, static_cast<int64_t>(i));
    EXPECT_EQ(me.rank, (me.d * cp + me.c) * tp + me.t);
    EXPECT_EQ(me.shard, me.d % fsdp);
    EXPECT_EQ(me.groups[0], members(me, [](const Row& a, const Row& b) { return a.d == b.d && a.c == b.c; }));
    EXPECT_EQ(me.groups[1], members(me, [](const Row& a, const Row& b) { return a.d == b.d && a.t == b.t; }));
    EXPECT_EQ(me.groups[2], members(me, [&](const Row& a, const Row& b) {
                return a.d / fsdp == b.d / fsdp && a.c == b.c && a.t == b.t;
              }));
    EXPECT_EQ(me.groups[3],
              members(me, [&](const Row& a, const Row& b) { return a.d % fsdp == b.d % fsdp && a.t == b.t; }));
    EXPECT_EQ(me.groups[4], members(me, [](const Row& a, const Row& b) { return a.t == b.t; }));
  }
  // Every coordinate triple once.
  std::map<std::vector<int64_t>, int> seen;
  for (const Row& r : rows) ++seen[{r.d, r.c, r.t}];
  EXPECT_EQ(static_cast<int64_t>(seen.size()), dp * cp * tp);
}

// With sp a sixth group: replica_tp, the ranks of the same shard index across every tp rank. On
// dp=4,tp=2,fsdp=2 rank (d, t) = 2d + t, so shard index 0 (d = 0, 2) is ranks 0,1,4,5 and
// shard index 1 (d = 1, 3) is ranks 2,3,6,7.
TEST(ExplainLayout, SequenceParallelAddsTheReplicaTpGroup) {
  const testing::CommandOutcome o = magic_check("--topology dp=4,tp=2,fsdp=2,sp --explain-layout");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::vector<std::string> lines = split(o.output, '\n');
  std::vector<std::string> last_column;
  bool in_table = false;
  for (const std::string& line : lines) {
    if (line.rfind("rank  ", 0) == 0) {
      in_table = true;
      EXPECT_NE(line.find("replica_tp group"), std::string::npos) << line;
      continue;
    }
    if (!in_table || line.empty()) continue;
    last_column.push_back(line.substr(line.find_last_of(' ') + 1));
  }
  const std::vector<std::string> expected = {"0,1,4,5", "0,1,4,5", "2,3,6,7", "2,3,6,7",
                                             "0,1,4,5", "0,1,4,5", "2,3,6,7", "2,3,6,7"};
  EXPECT_EQ(last_column, expected) << o.output;
  // magic-run explains the same layout the same way.
  const testing::CommandOutcome run =
      testing::magic_run("--config " + testing::write_tiny_run_config("explain-sp", {}) +
                         " --topology dp=4,tp=2,fsdp=2,sp --explain-layout");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, o.output);
}

// The layout is checked as a run would check it before anything is explained: exit 2 naming the rule.
TEST(ExplainLayout, ABadLayoutIsRefusedFirst) {
  struct Case {
    std::string args, fragment;
  };
  // Judged in-process as magic-check parses its flags (tools/check_command.h); the first also
  // through the program, which must print no rank.
  for (const Case& c : std::vector<Case>{
           {"--topology dp=2,sp", "sp needs tp > 1"},
           {"--topology dp=4,fsdp=3", "fsdp=3 must divide dp=4"},
           {"--topology dp=2,mb=4 --batch 7", "mb=4 needs at least 4 rows on every dp replica"},
           {"--topology tp=4 --model " + testing::source_path("fixtures/models/neox-tiny"),
            "--topology dp=1,tp=4: tp=4 does not divide the model's 2 attention heads"},
           {"--topology n_ci=2,n_per_block=1", "--explain-layout: explains mesh layouts"},
       }) {
    const std::string refused = testing::magic_check_refusal(c.args + " --explain-layout");
    EXPECT_NE(refused.find(c.fragment), std::string::npos) << c.args << "\n" << refused;
  }
  const testing::CommandOutcome o = magic_check("--topology dp=2,sp --explain-layout");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("sp needs tp > 1"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("rank = "), std::string::npos) << o.output;
}

}  // namespace
}  // namespace magic
