// The byte-level BPE tokenizer's parts on cases derived by hand from their definitions (GPT-2's
// split pattern, the merge rule, added tokens, NFC), and its refusals of folders it cannot read.
// The whole tokenizer against an independent encoder on 12,000 lines: tests/js/gpt2_tokenizer_oracle.js.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lib/core/error.h"
#include "lib/text/bpe_model.h"
#include "lib/text/gpt2_split.h"
#include "lib/text/tokenizer_folder.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> split(const std::string& text) {
  return gpt2_split(text, "test");
}

TEST(Gpt2Split, CutsTextAsThePatternsAlternativesDo) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  // Contractions are their own pieces, lower case only; the apostrophe otherwise joins the others.
  EXPECT_EQ(split("I'm fine, isn't it?"), (V{"I", "'m", " fine", ",", " isn", "'t", " it", "?"}));
  EXPECT_EQ(split("'s's 'S"), (V{"'s", "'s", " '", "S"}));
  // \s+(?!\S) leaves a run's last blank to the word after it; a lone blank before a word is \s+.
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(split("a \t\nb"), (V{"a", " \t", "\n", "b"}));
  EXPECT_EQ(split("x  "), (V{"x", "  "}));
  // Letters, numbers (Nd, Nl, No) and the rest are separate runs, each with an optional space.
  EXPECT_EQ(split("abc123def 2024 \xe5\xb9\xb4"), (V{"abc", "123", "def", " 2024", " \xe5\xb9\xb4"}));
  EXPECT_EQ(split("\xe2\x85\xab\xc2\xbd\xc2\xb2"), (V{"\xe2\x85\xab\xc2\xbd\xc2\xb2"}));  // Ⅻ½²: one number run
  EXPECT_EQ(split("\xc2\xa1Hola!"), (V{"\xc2\xa1", "Hola", "!"}));                        // ¡ is punctuation
  EXPECT_EQ(split("hi \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd!"), (V{"hi", " \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd!"}));
  EXPECT_EQ(split(""), V{});
}

// Where JavaScript's \s (the oracle's) and Unicode's White_Space (ours, Python regex's and the
// Hugging Face tokenizers') differ: U+0085 is White_Space, U+FEFF is a format character.
TEST(Gpt2Split, ReadsBlanksAsUnicodesWhiteSpace) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("a\xc2\x85\xc2\x85"
                  "b"),
            (V{"a", "\xc2\x85", "\xc2\x85", "b"}));
  EXPECT_EQ(split("a\xef\xbb\xbf\xef\xbb\xbf"
                  "b"),
            (V{"a", "\xef\xbb\xbf\xef\xbb\xbf", "b"}));
}

TEST(Gpt2Split, RefusesInvalidUtf8NamingTheByte) {
  const std::string why = testing::input_error_of([] { gpt2_split("ab\xff", "line 3"); });
  EXPECT_NE(why.find("line 3: invalid UTF-8 at byte 2"), std::string::npos) << why;
  EXPECT_NE(testing::input_error_of([] { gpt2_split("\xe0\x80\xaf", "t"); }).find("overlong"), std::string::npos);
  EXPECT_NE(testing::input_error_of([] { gpt2_split("\xed\xa0\x80", "t"); }).find("surrogate"), std::string::npos);
  EXPECT_NE(testing::input_error_of([] { gpt2_split("\xe5\xb9", "t"); }).find("ends inside"), std::string::npos);
}

// A byte-level vocabulary: byte b has id b (as its printable character), then `extra` tokens.
std::unordered_map<std::string, int64_t> byte_vocab(const std::vector<std::string>& extra) {
  std::unordered_map<std::string, int64_t> vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace(byte_char(static_cast<uint8_t>(b)), b);
  for (const auto& t : extra) vocab.emplace(t, static_cast<int64_t>(vocab.size()));
  return vocab;
}

TEST(BpeModel, MergesTheLowestRankFirstAndEveryOccurrenceLeftToRight) {
  // "Ġ" is the space's byte character.
  const BpeModel the(byte_vocab({"Ġt", "he", "Ġthe"}), {{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}}, "test");
  EXPECT_EQ(the.encode_piece(" the"), (std::vector<int64_t>{258}));
  EXPECT_EQ(the.encode_piece(" th"), (std::vector<int64_t>{256, 'h'}));
  const BpeModel ab_first(byte_vocab({"ab", "bc"}), {{"a", "b"}, {"b", "c"}}, "test");
  EXPECT_EQ(ab_first.encode_piece("abc"), (std::vector<int64_t>{256, 'c'}));
  const BpeModel bc_first(byte_vocab({"ab", "bc"}), {{"b", "c"}, {"a", "b"}}, "test");
  EXPECT_EQ(bc_first.encode_piece("abc"), (std::vector<int64_t>{'a', 257}));
  const BpeModel aa(byte_vocab({"aa"}), {{"a", "a"}}, "test");
  EXPECT_EQ(aa.encode_piece("aaa"), (std::vector<int64_t>{256, 'a'}));
  EXPECT_EQ(aa.token_bytes(256), "aa");
  EXPECT_EQ(the.token_bytes(258), " the");
}

TEST(BpeModel, RefusesAVocabularyThatCannotEncodeEveryByteOrMerge) {
  auto vocab = byte_vocab({});
  vocab.erase(byte_char(0x80));
  std::string why = testing::input_error_of([&] { BpeModel(vocab, {}, "v.json"); });
  EXPECT_NE(why.find("v.json: the vocabulary has no token for byte 128"), std::string::npos) << why;
  why = testing::input_error_of([&] { BpeModel(byte_vocab({}), {{"a", "b"}}, "v.json"); });
  EXPECT_NE(why.find("merge 0 ('a b') makes 'ab', which is not in the vocabulary"), std::string::npos) << why;
  auto twice = byte_vocab({});
  twice["dup"] = 5;
  why = testing::input_error_of([&] { BpeModel(twice, {}, "v.json"); });
  EXPECT_NE(why.find("id 5 is given to both"), std::string::npos) << why;
}

// A model folder written by the test: tokenizer.json (or vocab.json + merges.txt) and extra files.
class TokenizerFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "tokenizer_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << text;
  }
  json tokenizer_json() const {
    json vocab = json::object();
    for (const auto& [token, id] : byte_vocab({"Ġt", "he", "Ġthe"})) vocab[token] = id;
    return {{"version", "1.0"},
            {"added_tokens",
             {{{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}},
              {{"id", 301}, {"content", "  "}, {"special", false}},
              {{"id", 302}, {"content", "   "}, {"special", false}}}},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}}},
            {"post_processor", {{"type", "ByteLevel"}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", vocab}, {"merges", {"Ġ t", "h e", "Ġt he"}}}}};
  }
  std::string refusal() const {
    return testing::input_error_of([&] { load_tokenizer_folder(dir_); });
  }

  std::string dir_;
};

TEST_F(TokenizerFolder, CutsAddedTokensOutLongestFirstAndEncodesTheRest) {
  write("tokenizer.json", tokenizer_json().dump());
  const BpeTokenizer t = load_tokenizer_folder(dir_);
  EXPECT_EQ(t.encode("x   y<|endoftext|>z"), (std::vector<int64_t>{'x', 302, 'y', 300, 'z'}));
  EXPECT_EQ(t.encode(" the  the"), (std::vector<int64_t>{258, 301, 't', 257}));
  EXPECT_EQ(t.decode(t.encode("x   y<|endoftext|>z the")), "x   y<|endoftext|>z the");
  EXPECT_EQ(t.vocab_bound(), 303);
  EXPECT_FALSE(t.eos_id().has_value());
  EXPECT_NE(testing::input_error_of([&] { t.decode({303}); }).find("id 303 is not a token"), std::string::npos);
}

TEST_F(TokenizerFolder, AppliesNfcAndThePrefixSpaceWhereTheFileAsksForThem) {
  json doc = tokenizer_json();
  write("tokenizer.json", doc.dump());
  // e + combining acute (U+0301) stays two characters without a normalizer, becomes é (C3 A9) with NFC.
  EXPECT_EQ(load_tokenizer_folder(dir_).encode("e\xcc\x81"), (std::vector<int64_t>{'e', 0xcc, 0x81}));
  doc["normalizer"] = {{"type", "NFC"}};
  doc["pre_tokenizer"]["add_prefix_space"] = true;
  write("tokenizer.json", doc.dump());
  const BpeTokenizer t = load_tokenizer_folder(dir_);
  EXPECT_EQ(t.encode("e\xcc\x81"), (std::vector<int64_t>{' ', 0xc3, 0xa9}));
  EXPECT_EQ(t.encode("the"), (std::vector<int64_t>{258}));
}

TEST_F(TokenizerFolder, TakesSpecialTokensFromTheConfigsAndRefusesDisagreement) {
  write("tokenizer.json", tokenizer_json().dump());
  write("config.json", R"({"model_type": "gpt2", "eos_token_id": 300, "bos_token_id": 300})");
  write("tokenizer_config.json", R"({"eos_token": {"content": "<|endoftext|>"}})");
  const BpeTokenizer t = load_tokenizer_folder(dir_);
  EXPECT_EQ(t.eos_id(), 300);
  EXPECT_EQ(t.bos_id(), 300);
  EXPECT_EQ(t.pad_id(), 300) << "padding falls back to the end-of-text token";
  write("tokenizer_config.json", R"({"eos_token": "x"})");
  const std::string why = refusal();
  EXPECT_NE(why.find("config.json: eos_token_id is id 300 but"), std::string::npos) << why;
  EXPECT_NE(why.find("tokenizer_config.json: eos_token is id 120"), std::string::npos) << why;
}

TEST_F(TokenizerFolder, ReadsVocabAndMergesAndMatchesTheirSpecialTokenInText) {
  json vocab = json::object();
  for (const auto& [token, id] : byte_vocab({"Ġt", "he", "Ġthe", "<|endoftext|>"})) vocab[token] = id;
  write("vocab.json", vocab.dump());
  write("merges.txt", "#version: 0.2\nĠ t\nh e\nĠt he\n");
  EXPECT_EQ(load_tokenizer_folder(dir_).encode("a<|endoftext|>"),
            (std::vector<int64_t>{'a', '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'}))
      << "no config: the text is ordinary text";
  write("config.json", R"({"eos_token_id": 259})");
  EXPECT_EQ(load_tokenizer_folder(dir_).encode("a<|endoftext|> the"), (std::vector<int64_t>{'a', 259, 258}));
}

TEST_F(TokenizerFolder, RefusesWhatItDoesNotImplementByKey) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& d) { d["model"]["type"] = "WordPiece"; }, "model.type: 'WordPiece' is not supported"},
      {[](json& d) {
         d["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "pre_tokenizer.type: 'Metaspace'"},
      {[](json& d) {
         d["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer: "},
      {[](json& d) {
         d["post_processor"] = {{"type", "TemplateProcessing"}};
       },
       "post_processor.type"},
      {[](json& d) { d["model"]["byte_fallback"] = true; }, "model.byte_fallback: true is not supported"},
      {[](json& d) { d["model"]["dropout"] = 0.1; }, "model.dropout"},
      {[](json& d) { d["model"]["merges"][1] = "h e x"; }, "model.merges[1]: expected"},
      {[](json& d) { d["model"]["merges"][1] = "h z"; }, "makes 'hz', which is not in the vocabulary"},
      {[](json& d) { d["added_tokens"][0]["lstrip"] = true; }, "added_tokens[0].lstrip: true is not supported"},
      {[](json& d) { d.erase("pre_tokenizer"); }, "pre_tokenizer: missing"},
  };
  for (const auto& [edit, expected] : cases) {
    json doc = tokenizer_json();
    edit(doc);
    write("tokenizer.json", doc.dump());
    const std::string why = refusal();
    EXPECT_NE(why.find("tokenizer.json: " + expected.substr(0, expected.find(':') + 1)), std::string::npos) << why;
    EXPECT_NE(why.find(expected), std::string::npos) << why;
  }
}

TEST_F(TokenizerFolder, RefusesAFolderWithoutATokenizer) {
  EXPECT_NE(refusal().find("no tokenizer.json, nor vocab.json and merges.txt"), std::string::npos) << refusal();
  write("vocab.json", "{\"a\": 0}");
  EXPECT_NE(refusal().find("merges.txt: cannot open"), std::string::npos) << refusal();
  write("tokenizer.json", "{\"model\": ");
  EXPECT_NE(refusal().find("tokenizer.json: invalid JSON"), std::string::npos) << refusal();
  fs::remove_all(dir_);
  EXPECT_NE(refusal().find("not a folder"), std::string::npos) << refusal();
}

}  // namespace
}  // namespace magic
