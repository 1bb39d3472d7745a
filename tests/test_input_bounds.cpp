// Every reader's size bounds (input_limits.h, docs/limits.md), one function at a time: a file
// that is no regular file, longer than its bound or nested too deep is refused by name before
// anything its size would allocate, and text from a file reaches a message only escaped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lib/core/error.h"
#include "lib/core/input_file.h"
#include "lib/core/input_limits.h"
#include "lib/core/json_fields.h"
#include "lib/core/utf8.h"
#include "lib/model/gpt.h"
#include "lib/text/bpe_model.h"
#include "lib/text/tokenizer_folder.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(static_cast<size_t>(depth), '[') + inner + std::string(static_cast<size_t>(depth), ']');
}

TEST(InputFile, RefusesWhatIsNoRegularFileByItsKind) {
  EXPECT_NE(testing::input_error_of([] {
              require_regular_file("/dev/zero", "data file");
            }).find("/dev/zero: is a device, expected a data file"),
            std::string::npos);
  const std::string dir = testing::fresh_dir("regular-file");
  fs::create_directories(dir);
  EXPECT_NE(testing::input_error_of([&] { require_regular_file(dir, "data file"); }).find("is a directory"),
            std::string::npos);
  EXPECT_NE(testing::input_error_of([&] {
              require_regular_file(dir + "/absent", "data file");
            }).find("cannot open data file (No such file or directory)"),
            std::string::npos);
  EXPECT_EQ(testing::input_error_of([] { require_regular_file("/proc/self/exe", "data file"); }), "");
}

TEST(InputFile, RefusesAFileLongerThanItsBoundBeforeReadingIt) {
  const std::string path = testing::fresh_dir("bounded") + ".txt";
  std::ofstream(path) << std::string(100, 'x');
  EXPECT_EQ(read_input_file(path, "JSON file", 100), std::string(100, 'x'));
  EXPECT_NE(testing::input_error_of([&] {
              read_input_file(path, "JSON file", 99);
            }).find("100 bytes, more than the 99 bytes a JSON file may hold"),
            std::string::npos);
  fs::remove(path);
}

TEST(InputFile, ALineLongerThanItsBoundIsRefusedWhereItStarts) {
  std::istringstream in("ab\n" + std::string(10, 'x') + "\ncd");
  std::string line;
  ASSERT_TRUE(read_bounded_line(in, line, 10, "f.jsonl", 1));
  EXPECT_EQ(line, "ab");
  ASSERT_TRUE(read_bounded_line(in, line, 10, "f.jsonl", 2));  // exactly the bound
  ASSERT_TRUE(read_bounded_line(in, line, 10, "f.jsonl", 3));
  EXPECT_EQ(line, "cd");
  EXPECT_FALSE(read_bounded_line(in, line, 10, "f.jsonl", 4));
  std::istringstream long_line("ok\n" + std::string(11, 'x'));
  ASSERT_TRUE(read_bounded_line(long_line, line, 10, "f.jsonl", 1));
  EXPECT_EQ(testing::input_error_of([&] { read_bounded_line(long_line, line, 10, "f.jsonl", 2); }),
            "f.jsonl: line 2 is longer than 10 bytes (the bound on one line: docs/limits.md)");
}

TEST(JsonNesting, CountsBracketsOutsideStringsOnly) {
  EXPECT_EQ(testing::input_error_of([] { require_json_nesting(nested(limits::kNesting), "x"); }), "");
  EXPECT_EQ(
      testing::input_error_of([] { require_json_nesting("{\"a\": \"" + std::string(500, '[') + "\\\"[\"}", "x"); }),
      "");
  EXPECT_EQ(testing::input_error_of([] { require_json_nesting(nested(limits::kNesting + 1), "x"); }),
            "x: nested deeper than 128 at line 1, column 129 (the bound on nesting: docs/limits.md)");
  // Closing brackets bring the depth back: 200 siblings of depth 100 pass.
  std::string siblings = "[";
  for (int i = 0; i < 200; ++i) siblings += (i ? "," : "") + nested(100);
  EXPECT_EQ(testing::input_error_of([&] { require_json_nesting(siblings + "]", "x"); }), "");
}

TEST(JsonNesting, ReadJsonFileRefusesADeepValueByName) {
  const std::string path = testing::fresh_dir("deep") + ".json";
  std::ofstream(path) << "{\"model\": {\"d_model\": " << nested(100000) << "}}";
  EXPECT_NE(testing::input_error_of([&] { read_json_file(path); }).find(path + ": nested deeper than 128"),
            std::string::npos);
  fs::remove(path);
}

TEST(QuotedInput, EscapesControlCharactersAndCutsLongText) {
  EXPECT_EQ(quoted_input("a\x1b[31mb\x7f"), "a\\x1B[31mb\\x7F");
  EXPECT_EQ(quoted_input("\xff\xc3\xa9"), "\\xFF\xc3\xa9");  // é stays, a stray byte does not
  EXPECT_EQ(quoted_input(std::string(100, 'x'), 80), std::string(80, 'x') + "...");
  EXPECT_EQ(quoted_input(std::string(80, 'x'), 80), std::string(80, 'x'));
}

// Every refusal quotes its input through this constructor: the fuzz harnesses found raw bytes in
// hundreds of messages (a topology key, a run config's enum, a safetensors entry name).
TEST(QuotedInput, AnInputErrorKeepsNoRawByteOfItsInput) {
  EXPECT_STREQ(InputError("--topology 'a\x1d': unknown key 'p\x1b[2J\xff'").what(),
               "--topology 'a\\x1D': unknown key 'p\\x1B[2J\\xFF'");
  EXPECT_STREQ(InputError(std::string(500, 'x')).what(), std::string(500, 'x').c_str());  // never cut
}

// The count a memory estimate uses, against the tree gpt_init really builds (and one rank's
// shards of its first dimension, rounded up, counted tensor by tensor).
TEST(GptParameterCount, IsWhatGptInitBuildsWithoutBuildingIt) {
  for (const bool rotary : {false, true}) {
    for (const bool tied : {false, true}) {
      GptConfig c;
      c.vocab = 301, c.d_model = 12, c.n_layers = 3, c.n_heads = 2, c.max_len = 17;
      c.positions = rotary ? Positions::kRotary : Positions::kLearned;
      if (rotary) c.rotary_dims = 6;
      c.tied_head = tied;
      const TensorTree tree = gpt_init(c, at::kFloat, 0);
      EXPECT_EQ(gpt_parameter_count(c), static_cast<double>(tree.numel()));
      for (const int64_t fsdp : {2, 5}) {
        double shards = 0;
        for (const auto& e : tree) {
          const int64_t rows = e.tensor.size(0);
          shards += static_cast<double>((rows + fsdp - 1) / fsdp * (e.tensor.numel() / rows));
        }
        EXPECT_EQ(gpt_parameter_count(c, fsdp), shards) << "fsdp " << fsdp;
      }
    }
  }
  GptConfig huge;
  huge.n_layers = 1'000'000'000;  // counted, not looped over
  EXPECT_GT(gpt_parameter_count(huge), 1e12);
}

std::unordered_map<std::string, int64_t> byte_vocab() {
  std::unordered_map<std::string, int64_t> vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace(byte_char(static_cast<uint8_t>(b)), b);
  return vocab;
}

TEST(BpeIds, AFarIdIsRefusedBeforeTheIdTableGrowsToIt) {
  auto vocab = byte_vocab();
  vocab.emplace("far", 50'000'000);  // 1.7 GB of id table before this bound
  EXPECT_NE(testing::input_error_of([&] {
              BpeModel(vocab, {}, "tokenizer.json");
            }).find("tokenizer.json: vocabulary token 'far' has id 50000000, expected 0..1537"),
            std::string::npos);
  vocab["far"] = 1537;  // 2 x 257 entries + 1024 - 1: the last id allowed
  EXPECT_EQ(testing::input_error_of([&] { BpeModel(vocab, {}, "tokenizer.json"); }), "");
}

// A merges file's errors blame merges.txt, not vocab.json, and show its bytes escaped: a file
// cannot write terminal escape codes through our messages.
TEST(BpeIds, AMergesFilesErrorsNameItAndEscapeItsBytes) {
  const std::string dir = testing::fresh_dir("merges-blame");
  fs::create_directories(dir);
  nlohmann::json vocab;
  for (const auto& [text, id] : byte_vocab()) vocab[text] = id;
  std::ofstream(dir + "/vocab.json") << vocab.dump();
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\na b c\x1b[2J\n";
  const std::string bad_line = testing::input_error_of([&] { load_tokenizer_folder(dir); });
  EXPECT_NE(bad_line.find(dir + "/merges.txt: line 2: expected two tokens separated by one space, got 'a b "
                                "c\\x1B[2J'"),
            std::string::npos)
      << bad_line;
  std::ofstream(dir + "/merges.txt") << "a \x1b]0;owned\x07\n";
  const std::string not_in_vocab = testing::input_error_of([&] { load_tokenizer_folder(dir); });
  EXPECT_NE(not_in_vocab.find(dir + "/merges.txt: merge 0 ('a \\x1B]0;owned\\x07') makes"), std::string::npos)
      << not_in_vocab;
  EXPECT_NE(not_in_vocab.find("which is not in the vocabulary of " + dir + "/vocab.json"), std::string::npos);
  EXPECT_EQ(not_in_vocab.find('\x1b'), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace magic
