#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "lib/core/error.h"
#include "lib/data/data_stream.h"
#include "lib/model/lm_loss.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(ByteTokenizer, RoundTripsUtf8AndEndsWithEndOfDocument) {
  ByteTokenizer tok;
  const std::string text = "Wisdom \xc3\xa9t\xc3\xa9";
  auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size() + 1);
  EXPECT_EQ(ids.back(), ByteTokenizer::kEndOfDocument);
  EXPECT_EQ(ids[0], 'W');
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TextLoader, ReadsTheFixtureJsonlWithIds) {
  auto docs = load_jsonl(testing::source_path("fixtures/text/proverbs.jsonl"));
  ASSERT_EQ(docs.size(), 375u);
  EXPECT_EQ(docs[0].id, "Prv10:1");
  EXPECT_EQ(docs[0].text.substr(0, 24), "The proverbs of Solomon.");
}

// A line that is not UTF-8 is refused in one line naming the file, the line, the column and the
// byte offset, the bad bytes as \xNN: no raw byte, no JSON library text (issue 43).
TEST(TextLoader, ALineThatIsNotUtf8IsNamedByLineAndOffsetWithItsBytesEscaped) {
  const auto latin1 =
      write_temp("latin1.jsonl", "{\"id\": 1, \"text\": \"ok\"}\n{\"id\": 2, \"text\": \"caf\xE9 au lait\"}\n");
  const std::string why = testing::input_error_of([&] { load_jsonl(latin1); });
  EXPECT_EQ(why, latin1 +
                     ":2: not valid UTF-8 at column 23 (byte offset 46 in the file): \\xE9 in "
                     "{\"id\": 2, \"text\": \"caf\\xE9 au lait\"}; expected UTF-8 text");
  EXPECT_EQ(why.find("json.exception"), std::string::npos) << why;
  EXPECT_EQ(why.find('\xE9'), std::string::npos) << "a raw byte reached the message";
}

TEST(TextLoader, PlainTextSplitsOnBlankLines) {
  auto docs = load_plain_text(testing::source_path("fixtures/text/sample.txt"));
  ASSERT_EQ(docs.size(), 4u);
  EXPECT_EQ(docs[0].text.substr(0, 18), "To every thing the");
  EXPECT_NE(docs[0].text.find('\n'), std::string::npos);
  EXPECT_NE(docs[1].id.find("sample.txt:4"), std::string::npos) << docs[1].id;
}

TEST(TextLoader, MalformedJsonlNamesFileAndLine) {
  const auto bad = write_temp("bad.jsonl", "{\"id\": 1, \"text\": \"one\"}\n\n{\"id\": 2, \"text\": \"two\"\n");
  EXPECT_NE(testing::input_error_of([&] { load_jsonl(bad); }).find("bad.jsonl:3: malformed JSON line"),
            std::string::npos)
      << testing::input_error_of([&] { load_jsonl(bad); });
  const auto missing = write_temp("missing.jsonl", "{\"body\": \"x\"}\n");
  EXPECT_NE(testing::input_error_of([&] { load_jsonl(missing); }).find("missing.jsonl:1: missing text field 'text'"),
            std::string::npos);
  const auto wrong = write_temp("wrong.jsonl", "{\"id\": 1, \"text\": 7}\n");
  EXPECT_NE(testing::input_error_of([&] { load_jsonl(wrong); }).find("must be a string, got number"),
            std::string::npos);
  EXPECT_NE(testing::input_error_of([&] { load_jsonl("/nonexistent/x.jsonl"); }).find("cannot open"),
            std::string::npos);
}

// Scores join to examples by id: an id is required where id_field names one (like the text), is a
// string or an integer, and is unique; an empty id_field names documents by file and line.
TEST(TextLoader, IdsAreRequiredUniqueAndOfAJoinableType) {
  const auto no_id = write_temp("no-id.jsonl", "{\"id\": \"a\", \"text\": \"x\"}\n{\"text\": \"y\"}\n");
  EXPECT_NE(testing::input_error_of([&] { load_jsonl(no_id); }).find("no-id.jsonl:2: missing id field 'id'"),
            std::string::npos)
      << testing::input_error_of([&] { load_jsonl(no_id); });
  const auto twice =
      write_temp("twice.jsonl", "{\"id\": \"a\", \"text\": \"x\"}\n\n{\"id\": \"a\", \"text\": \"y\"}\n");
  EXPECT_NE(
      testing::input_error_of([&] { load_jsonl(twice); }).find("twice.jsonl:3: duplicate id 'a' (first on line 1)"),
      std::string::npos)
      << testing::input_error_of([&] { load_jsonl(twice); });
  const auto listed = write_temp("listed.jsonl", "{\"id\": [1], \"text\": \"x\"}\n");
  EXPECT_NE(testing::input_error_of([&] { load_jsonl(listed); }).find("must be a string or an integer, got array"),
            std::string::npos);
  const auto numbered = write_temp("numbered.jsonl", "{\"id\": 7, \"text\": \"x\"}\n");
  EXPECT_EQ(load_jsonl(numbered).at(0).id, "7");
  const auto unnamed = load_jsonl(no_id, DocumentFields{"text", "", ""});
  ASSERT_EQ(unnamed.size(), 2u);
  EXPECT_NE(unnamed[1].id.find("no-id.jsonl:2"), std::string::npos) << unnamed[1].id;
}

TEST(TokenDataset, ChunksToMaxLenAndPadsWithIgnoredLabels) {
  std::vector<TextDocument> docs{{"a", "abcdefghij"}, {"b", "xy"}};  // 11 and 3 tokens with end-of-document
  auto data = tokenize_documents(docs, ByteTokenizer(), 4);
  // "a": chunks of 4, 4, 3 tokens; "b": 3 tokens.
  ASSERT_EQ(data.size(), 4);
  EXPECT_EQ(data.examples[0].id, "a#0");
  EXPECT_EQ(data.examples[2].length, 3);
  EXPECT_EQ(data.examples[3].id, "b");
  EXPECT_EQ(data.labels[3][3].item<int64_t>(), kIgnoreLabel);
  EXPECT_EQ(data.input_ids[3][3].item<int64_t>(), ByteTokenizer::kEndOfDocument);
  EXPECT_EQ(data.labels[0][1].item<int64_t>(), 'b');
  // A final piece of one token holds no label and is dropped: "abcd" + EOS with max_len 4.
  auto dropped = tokenize_documents({{"c", "abcd"}}, ByteTokenizer(), 4);
  EXPECT_EQ(dropped.size(), 1);
  EXPECT_NE(testing::input_error_of([] {
              tokenize_documents({{"a", "abc"}}, ByteTokenizer(), 1);
            }).find("max_len must be >= 2"),
            std::string::npos);
}

// A chunk row's text is its own chunk of the document (magic-run's rows, scores.tsv, the report),
// and the dataset counts the documents it split or dropped for the run's summary line.
TEST(TokenDataset, ChunksKnowTheirOwnTextAndSplitDocumentsAreCounted) {
  const std::vector<TextDocument> docs{{"a", "abcdefghij"}, {"b", "xy"}, {"c", ""}, {"d", "\xC3\xA9t\xC3\xA9"}};
  const ByteTokenizer bytes;
  const auto data = tokenize_documents(docs, bytes, 4);
  // "a": 11 tokens in chunks of 4, 4, 3; "b": 3 tokens; "c": the end token alone, dropped;
  // "d": 5 bytes + end token in chunks of 4 and 2, the second starting inside a character.
  ASSERT_EQ(data.size(), 6);
  EXPECT_EQ(example_text(data, 0, bytes), "abcd");
  EXPECT_EQ(example_text(data, 1, bytes), "efgh");
  EXPECT_EQ(example_text(data, 2, bytes), "ij");  // the end token has no text
  EXPECT_EQ(data.examples[2].offset, 8);
  EXPECT_EQ(example_text(data, 3, bytes), "xy");
  EXPECT_EQ(data.examples[4].id, "d#0");
  EXPECT_EQ(example_text(data, 4, bytes) + example_text(data, 5, bytes), docs[3].text);
  EXPECT_EQ(example_text(data, 5, bytes), "\xA9");
  EXPECT_EQ(data.documents, 4);
  EXPECT_EQ(data.split_documents, 2);    // a and d
  EXPECT_EQ(data.dropped_documents, 1);  // c
  const auto whole = tokenize_documents(docs, ByteTokenizer(), 16);
  EXPECT_EQ(whole.split_documents, 0);
  EXPECT_EQ(example_text(whole, 0, bytes), "abcdefghij");
}

std::vector<int64_t> row_of(const at::Tensor& t, int64_t i) {
  const at::Tensor r = t[i].contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

constexpr int64_t E = ByteTokenizer::kEndOfDocument, X = kIgnoreLabel;

// A pair is its prompt's bytes then its completion's and the end token; the prompt's labels are
// ignored, so the first label is the completion's first byte, predicted from the prompt's last.
TEST(TokenDataset, APairsPromptTokensCarryNoLabel) {
  const auto data = tokenize_documents({{"p", "cd", "ab"}, {"q", "", "xyz"}}, ByteTokenizer(), 6);
  ASSERT_EQ(data.size(), 2);
  EXPECT_EQ(row_of(data.input_ids, 0), (std::vector<int64_t>{'a', 'b', 'c', 'd', E, E}));
  EXPECT_EQ(row_of(data.labels, 0), (std::vector<int64_t>{X, X, 'c', 'd', E, X}));
  // An empty completion still predicts the end of the document.
  EXPECT_EQ(row_of(data.labels, 1), (std::vector<int64_t>{X, X, X, E, X, X}));
  // Chunked, a piece that holds only prompt tokens has nothing to predict and is dropped.
  const auto chunked = tokenize_documents({{"r", "z", "abcdef"}}, ByteTokenizer(), 3);
  ASSERT_EQ(chunked.size(), 1);
  EXPECT_EQ(chunked.examples[0].id, "r#2");
  EXPECT_EQ(row_of(chunked.labels, 0), (std::vector<int64_t>{'z', E, X}));
  EXPECT_NE(testing::input_error_of([] {
              tokenize_documents({{"s", "z", "abcdef"}}, ByteTokenizer(), 3, "pairs", Fit::kTruncate);
            }).find("pairs: its one document yields no example with a token to predict"),
            std::string::npos);
}

TEST(TokenDataset, TruncationKeepsEachDocumentsFirstMaxLenTokens) {
  const std::vector<TextDocument> docs{{"a", "abcdefgh"}, {"b", "xy"}, {"c", ""}};
  const auto data = tokenize_documents(docs, ByteTokenizer(), 4, "data", Fit::kTruncate);
  ASSERT_EQ(data.size(), 2);
  EXPECT_EQ(data.examples[0].id, "a");
  EXPECT_EQ(row_of(data.input_ids, 0), (std::vector<int64_t>{'a', 'b', 'c', 'd'}));
  EXPECT_EQ(row_of(data.labels, 1), (std::vector<int64_t>{'x', 'y', E, X}));
  EXPECT_EQ(data.truncated_documents, 1);
  EXPECT_EQ(data.dropped_documents, 1);  // c: the end token alone
  EXPECT_EQ(data.split_documents, 0);
}

// Packed: a b c d e E f g E, cut every 4; the last row (E alone) predicts nothing and is dropped.
TEST(TokenDataset, PackingCutsTheDocumentsStreamAndRowsNameWhereTheyBegin) {
  const std::vector<TextDocument> docs{{"a", "abcde"}, {"b", "g", "f"}};
  const ByteTokenizer bytes;
  const auto data = tokenize_documents(docs, bytes, 4, "data", Fit::kPack);
  ASSERT_EQ(data.size(), 2);
  EXPECT_TRUE(data.packed);
  EXPECT_EQ(row_of(data.input_ids, 0), (std::vector<int64_t>{'a', 'b', 'c', 'd'}));
  EXPECT_EQ(row_of(data.input_ids, 1), (std::vector<int64_t>{'e', E, 'f', 'g'}));
  EXPECT_EQ(row_of(data.labels, 1), (std::vector<int64_t>{'e', E, X, 'g'})) << "the pair's prompt f stays masked";
  EXPECT_EQ(data.examples[1].id, "pack:1");
  EXPECT_EQ(data.examples[1].document, 0);
  EXPECT_EQ(data.examples[1].offset, 4);
  EXPECT_EQ(example_text(data, 1, bytes), "efg");
  EXPECT_EQ(parse_fit("pack"), Fit::kPack);
  EXPECT_NE(testing::input_error_of([] {
              parse_fit("squeeze", "data.fit");
            }).find("data.fit: unknown fit 'squeeze' (expected chunk, truncate or pack)"),
            std::string::npos);
}

TEST(TextLoader, PairsComeFromTheirTwoFieldsAndOnlyFromJsonl) {
  const std::string dir = ::testing::TempDir();
  const std::string pairs = dir + "/pairs.jsonl";
  std::ofstream(pairs) << R"({"id": "a", "prompt": "Q?", "completion": " A."})"
                       << "\n"
                       << R"({"id": "b", "prompt": "Q2?"})"
                       << "\n";
  const DocumentFields fields{"completion", "id", "prompt"};
  EXPECT_NE(testing::input_error_of([&] {
              load_jsonl(pairs, fields);
            }).find("pairs.jsonl:2: missing completion field 'completion'"),
            std::string::npos);
  std::ofstream(pairs) << R"({"id": "a", "prompt": "Q?", "completion": " A."})"
                       << "\n";
  const auto docs = load_jsonl(pairs, fields);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].prompt, "Q?");
  EXPECT_EQ(docs[0].text, " A.");
  EXPECT_NE(testing::input_error_of([&] {
              load_documents(testing::source_path("fixtures/text/sample.txt"), fields);
            }).find("sample.txt: prompt/completion pairs need a .jsonl file"),
            std::string::npos);
  fs::remove(pairs);
}

TEST(DataStream, EveryEpochVisitsEveryExampleOnceAndPadsTheLastBatch) {
  DataStream stream(10, StreamConfig{4, 9, 123, true});
  EXPECT_EQ(stream.batches_per_epoch(), 3);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::multiset<int64_t> seen;
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t r : stream.rows(epoch * 3 + b)) seen.insert(r);
    }
    for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(seen.count(i), 1u) << "epoch " << epoch;
    EXPECT_EQ(seen.count(stream.padding_row()), 2u);
  }
  EXPECT_NE(stream.rows(0), stream.rows(3)) << "epochs are reshuffled";
  EXPECT_EQ(DataStream(10, StreamConfig{4, 9, 123, true}).rows(4), stream.rows(4)) << "deterministic from the seed";
  EXPECT_NE(DataStream(10, StreamConfig{4, 9, 124, true}).rows(0), stream.rows(0));
}

TEST(DataStream, TooFewExamplesForOneBatchIsAnInputError) {
  EXPECT_NE(testing::input_error_of([] {
              DataStream(3, StreamConfig{4, 1, 0, true}, "train.jsonl");
            }).find("train.jsonl: too few examples for one batch: 3 examples, batch_size 4"),
            std::string::npos);
}

TEST(DataStream, PaddingRowsHaveZeroWeightAndNoLabels) {
  auto data = tokenize_documents({{"a", "hello"}, {"b", "world"}, {"c", "again"}}, ByteTokenizer(), 8);
  DataStream stream(3, StreamConfig{2, 2, 0, false});
  auto rows = stream.rows(1);
  EXPECT_EQ(rows, (std::vector<int64_t>{2, 3}));
  Batch batch = make_batch(data, rows);
  EXPECT_TRUE(batch.labels[1].eq(kIgnoreLabel).all().item<bool>());
  at::Tensor w = initial_weights(data, WeightKind::kPerToken, at::kDouble);
  at::Tensor gathered = gather_weights(w, batch.rows);
  EXPECT_TRUE(gathered[1].eq(0).all().item<bool>());
  EXPECT_TRUE(gathered[0].eq(1).all().item<bool>());
}

}  // namespace
}  // namespace magic
