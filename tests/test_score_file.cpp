// magic-run's score files join on id: ids and texts holding tabs, newlines, backslashes and bytes
// that are not UTF-8 come out as valid UTF-8 in both files, the TSV with one line per example,
// and unescaping a TSV id gives exactly the id the safetensors metadata's JSON holds.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lib/io/safetensors.h"
#include "lib/io/score_file.h"
#include "tests/support.h"

namespace magic {
namespace {

// The inverse of the TSV escaping: \\ \t \n \r.
std::string unescape_tsv(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\' || i + 1 == field.size()) {
      out += field[i];
      continue;
    }
    const char c = field[++i];
    out += c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, by);) parts.push_back(part);
  return parts;
}

TEST(ScoreFile, InvalidUtf8BytesBecomeHexEscapesAndValidTextIsKept) {
  EXPECT_EQ(printable_text("caf\xC3\xA9 \xE2\x82\xAC"), "caf\xC3\xA9 \xE2\x82\xAC");  // é, €
  EXPECT_EQ(printable_text("a\xFF"
                           "b"),
            "a\\xFFb");
  EXPECT_EQ(printable_text("\xC3"), "\\xC3");                    // a sequence cut short
  EXPECT_EQ(printable_text("\xC0\xAF"), "\\xC0\\xAF");           // an overlong '/'
  EXPECT_EQ(printable_text("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // a surrogate
}

TEST(ScoreFile, TsvAndSafetensorsJoinOnIdWhateverTheIdsHold) {
  ScoreTable table;
  table.scores = at::tensor({-1.5, 0.25, 2.0}, at::kDouble);
  table.example_ids = {"plain", "tab\there\nnewline\\slash", "bad\xFFid"};
  table.example_texts = {"one", "two\tcolumns\r\n", "caf\xC3\xA9\xFE"};
  const std::string dir = ::testing::TempDir() + "/score-file-join";
  std::filesystem::remove_all(dir);
  write_score_files(dir, table);

  const auto lines = split(testing::read_file(dir + "/scores.tsv"), '\n');
  ASSERT_EQ(lines.size(), 4u) << "a header and one line per example";
  const auto metadata = load_safetensors(dir + "/scores.safetensors").metadata;
  const auto json_ids = nlohmann::json::parse(metadata.at("example_ids")).get<std::vector<std::string>>();
  ASSERT_EQ(json_ids.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto fields = split(lines[i + 1], '\t');
    ASSERT_EQ(fields.size(), 3u) << lines[i + 1];
    EXPECT_EQ(unescape_tsv(fields[0]), json_ids[i]);
    EXPECT_EQ(json_ids[i], printable_text(table.example_ids[i]));
  }
  EXPECT_EQ(json_ids[2], "bad\\xFFid");
  EXPECT_EQ(unescape_tsv(split(lines[3], '\t')[2]), "caf\xC3\xA9\\xFE");  // the byte 0xFE, escaped
  EXPECT_EQ(split(lines[2], '\t')[2], "two\\tcolumns\\r\\n");
}

// magic-score-diff's flags: a tolerance that cannot be a relative error is bad input (exit 2),
// named, before any file is read.
TEST(ScoreDiffCli, AToleranceThatIsNotAFiniteNonNegativeNumberIsRefused) {
  for (const char* bad : {"-1", "nan", "inf"}) {
    const auto o =
        testing::run_command(std::string(MAGIC_SCORE_DIFF_BINARY) + " a.safetensors b.safetensors --tolerance " + bad);
    EXPECT_EQ(o.exit_code, 2) << bad << ": " << o.output;
    EXPECT_NE(o.output.find("--tolerance: expected a finite number >= 0"), std::string::npos) << o.output;
  }
}

// magic-score-diff takes magic-run's --out folders as magic-compare does (their scores.safetensors),
// and a path that is not there is named as missing, not read as a broken file (issue 43).
TEST(ScoreDiffCli, ComparesTwoRunFoldersAndNamesAPathThatIsNotThere) {
  const std::string dir = testing::fresh_dir("score-diff-folders");
  ScoreTable table;
  table.scores = at::tensor({-1.5, 0.25, 2.0}, at::kDouble);
  table.example_ids = {"a", "b", "c"};
  table.example_texts = {"one", "two", "three"};
  write_score_files(dir + "/a", table);
  write_score_files(dir + "/b", table);
  const std::string tool = MAGIC_SCORE_DIFF_BINARY;
  testing::CommandOutcome o = testing::run_command(tool + " " + dir + "/a " + dir + "/b");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("bit-identical: yes"), std::string::npos) << o.output;
  o = testing::run_command(tool + " " + dir + "/a " + dir + "/b/scores.safetensors");
  EXPECT_EQ(o.exit_code, 0) << o.output;

  o = testing::run_command(tool + " " + dir + "/a " + dir + "/absent");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_EQ(o.output, "magic-score-diff: error: " + dir +
                          "/absent: no such file or folder (expected a scores.safetensors file or magic-run's --out "
                          "folder)\n");
  std::filesystem::create_directories(dir + "/empty");
  o = testing::run_command(tool + " " + dir + "/empty " + dir + "/a");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_EQ(o.output, "magic-score-diff: error: " + dir +
                          "/empty: a folder without scores.safetensors (expected a scores.safetensors file or "
                          "magic-run's --out folder)\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace magic
