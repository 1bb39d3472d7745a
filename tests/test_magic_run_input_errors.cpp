// magic-run blames each bad input on the input that gave it (issue 43): the flag that set a value
// rather than the config file, the data file by its role, a byte that is not UTF-8 by its line
// and offset. Each is one line, exit 2, before anything is trained or written; and the rows the
// run prints show bytes that are not UTF-8 as \xNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "lib/train/attribution_text.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using Outcome = testing::CommandOutcome;

std::string write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// The error line of a refused run: exit 2, one line, nothing created under `out`.
std::string refusal(const std::string& args, const std::string& out) {
  const Outcome o = testing::magic_run(args + " --out " + out);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << "expected one line:\n" << o.output;
  EXPECT_FALSE(fs::exists(out)) << "a refused run created " << out;
  return o.output;
}

TEST(MagicRunInputErrors, ABadOverrideIsBlamedOnItsFlagNotTheConfigFile) {
  const std::string dir = testing::fresh_dir("blame-flag");
  fs::create_directories(dir);
  const std::string config = testing::write_tiny_run_config("blame-flag", {});
  for (const auto& [flag, line] : std::vector<std::pair<std::string, std::string>>{
           {"--optimizer.lr=-1", "magic-run: error: --optimizer.lr=-1: expected a learning rate >= 0, got -1\n"},
           {"--training.step 3",
            "magic-run: error: --training.step: unknown key 'step' in training (did you mean "
            "steps?)\n"},
           {"--training.steps '\"two\"'",
            "magic-run: error: --training.steps=\"two\": expected an integer, got string \"two\"\n"},
           // 2^63 - 1 steps overflowed the checkpoint schedule's arithmetic and never returned.
           {"--training.steps 9223372036854775807",
            "magic-run: error: --training.steps=9223372036854775807: expected an integer from 1 to 2^40 "
            "(1099511627776), got 9223372036854775807\n"}}) {
    EXPECT_EQ(refusal("--config " + config + " " + flag, dir + "/out"), line) << flag;
  }
}

TEST(MagicRunInputErrors, AnEmptyDataFileIsNamedWithItsRole) {
  const std::string dir = testing::fresh_dir("empty-data");
  fs::create_directories(dir);
  const std::string empty = write_file(dir + "/empty.jsonl", "");
  const std::string blank = write_file(dir + "/blank.jsonl", "\n  \n\n");
  const std::string hollow =
      write_file(dir + "/hollow.jsonl", "{\"id\": \"a\", \"text\": \"\"}\n{\"id\": \"b\", \"text\": \"\"}\n");
  const auto with = [&](const std::string& name, const std::string& key, const std::string& path) {
    return testing::write_tiny_run_config(name, {}, [&](nlohmann::json& j) { j["data"][key] = path; });
  };
  EXPECT_EQ(refusal("--config " + with("empty-train", "train", empty), dir + "/out"),
            "magic-run: error: " + empty + ": the training data (data.train) is empty: the file holds nothing\n");
  EXPECT_EQ(refusal("--config " + with("empty-queries", "queries", empty), dir + "/out"),
            "magic-run: error: " + empty + ": the query data (data.queries) is empty: the file holds nothing\n");
  EXPECT_EQ(
      refusal("--config " + with("blank-train", "train", blank), dir + "/out"),
      "magic-run: error: " + blank + ": the training data (data.train) is empty: the file holds only blank lines\n");
  EXPECT_EQ(refusal("--config " + with("hollow-queries", "queries", hollow), dir + "/out"),
            "magic-run: error: " + hollow +
                ": the query data (data.queries): none of its 2 documents yields an "
                "example with a token to predict\n");
}

TEST(MagicRunInputErrors, ADataLineThatIsNotUtf8IsOneCleanLine) {
  const std::string dir = testing::fresh_dir("not-utf8");
  fs::create_directories(dir);
  const std::string data = write_file(dir + "/latin1.jsonl", "{\"id\": 1, \"text\": \"na\xEFve\"}\n");
  const std::string config =
      testing::write_tiny_run_config("not-utf8", {}, [&](nlohmann::json& j) { j["data"]["train"] = data; });
  const std::string line = refusal("--config " + config, dir + "/out");
  EXPECT_EQ(line, "magic-run: error: " + data +
                      ":1: not valid UTF-8 at column 22 (byte offset 21 in the file): \\xEF "
                      "in {\"id\": 1, \"text\": \"na\\xEFve\"}; expected UTF-8 text\n");
}

// Plain text is read as bytes; the rows the run prints show those that are not UTF-8 as \xNN,
// as scores.tsv does.
TEST(MagicRunInputErrors, PrintedRowsShowBytesThatAreNotUtf8AsHexEscapes) {
  const std::string dir = testing::fresh_dir("rows-escaped");
  fs::create_directories(dir);
  std::string text;
  for (int i = 0; i < 8; ++i) text += "Verse " + std::to_string(i) + ": caf\xE9 and cr\xE8me, said the wise.\n\n";
  const std::string train = write_file(dir + "/latin1.txt", text);
  const std::string queries = write_file(dir + "/queries.txt", "The wise caf\xE9.\n");
  const std::string config = testing::write_tiny_run_config("rows-escaped", {}, [&](nlohmann::json& j) {
    j["data"]["train"] = train;
    j["data"]["queries"] = queries;
    j["model"]["max_len"] = 64;  // a verse is one row
    j["training"]["steps"] = 2;
  });
  const Outcome o = testing::magic_run("--config " + config + " --top 2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output.find('\xE9'), std::string::npos) << "a raw byte was printed:\n" << o.output;
  EXPECT_EQ(o.output.find('\xE8'), std::string::npos) << "a raw byte was printed:\n" << o.output;
  EXPECT_NE(o.output.find("  0  " + queries + ":1  The wise caf\\xE9.\n"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(": caf\\xE9 and cr\\xE8me, said the wise."), std::string::npos) << o.output;
}

// A row's cut at 90 bytes falls before a character it would split; the text is on one line.
TEST(MagicRunInputErrors, ARowsCutSplitsNoCharacter) {
  EXPECT_EQ(snippet("ab\xC3\xA9"
                    "cdefgh",
                    6),
            "ab...");  // the cut at 3 is inside é
  EXPECT_EQ(snippet("abc\xC3\xA9"
                    "defgh",
                    6),
            "abc...");                               // the cut at 3 is before é
  EXPECT_EQ(snippet("a\xFF\nb", 90), "a\\xFF\\nb");  // one line, the byte escaped
}

}  // namespace
}  // namespace magic
