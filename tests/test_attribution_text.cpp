// How a prompt/completion pair reads in magic-run's rows, report and scores.tsv: both parts, the
// arrow where the completion (the tokens that carry loss) begins, on one line, cut without
// splitting a character.
#include <gtest/gtest.h>

#include "lib/data/token_dataset.h"
#include "lib/train/attribution_text.h"

namespace magic {
namespace {

const std::string kArrow = "\xE2\x87\x92";  // U+21D2, three bytes

TEST(AttributionText, APairShowsBothPartsWithOneSpaceBesideTheArrow) {
  // The completion's own leading space is the one after the arrow: no doubled space.
  EXPECT_EQ(pair_text("Answer:", " A glad father."), "Answer: " + kArrow + " A glad father.");
  EXPECT_EQ(pair_text("Q: 2+2 =", "4"), "Q: 2+2 = " + kArrow + " 4");
  EXPECT_EQ(pair_text("Q:\n", " 4"), "Q:\n" + kArrow + " 4");
  EXPECT_EQ(pair_text("", " plain text"), " plain text");  // not a pair
  // On one line, and a cut at 90 bytes that would fall inside the arrow stops before it.
  EXPECT_EQ(snippet(pair_text("Q?\nA:", " yes"), 90), "Q?\\nA: " + kArrow + " yes");
  const std::string cut = snippet(pair_text(std::string(85, 'a'), " b"), 90);  // the arrow at bytes 86-88
  EXPECT_EQ(cut, std::string(85, 'a') + " ...");
}

// A chunk of a pair: its prompt tokens (no loss) and its completion tokens, in order; the arrow
// only where a completion follows a prompt.
TEST(AttributionText, AnExampleShowsItsPromptAndCompletionParts) {
  const ByteTokenizer bytes;
  std::vector<TextDocument> docs{{"p", " yes", "Q?"}, {"t", "plain"}};
  const TokenDataset data = tokenize_documents(docs, bytes, 5);
  // "p": Q ? ␠ y e s EOD = 7 tokens in chunks of 5 and 2; "t": p l a i n EOD in chunks of 5 and 1
  // (the last, one token, predicts nothing and is dropped).
  ASSERT_EQ(data.size(), 3);
  const std::vector<TextPart> first = example_parts(data, 0, bytes);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_TRUE(first[0].prompt);
  EXPECT_EQ(first[0].text, "Q?");
  EXPECT_FALSE(first[1].prompt);
  EXPECT_EQ(first[1].text, " ye");
  EXPECT_EQ(parts_text(first), "Q? " + kArrow + " ye");
  EXPECT_EQ(parts_text(example_parts(data, 1, bytes)), "s");  // inside the completion: no arrow
  EXPECT_EQ(parts_text(example_parts(data, 2, bytes)), "plain");
}

}  // namespace
}  // namespace magic
