// merged_records (lib/trace/record_order.h): every rank's records as one list for a dump's
// manifest, keeping each rank's own order; the expected lists are written out by hand.
#include <gtest/gtest.h>

#include <stdexcept>

#include "lib/trace/record_order.h"

namespace magic {
namespace {

TraceRecord named(const std::string& name, std::vector<Placement> placements = {Placement::replicate()}) {
  return {name, "activation", "forward", "forward", 0, "", std::move(placements)};
}

std::vector<std::string> names(const std::vector<TraceRecord>& records) {
  std::vector<std::string> out;
  for (const auto& r : records) out.push_back(r.name);
  return out;
}

TEST(RecordOrder, RanksThatMakeTheSameRecordsKeepTheirOrder) {
  const std::vector<TraceRecord> same = {named("c"), named("a"), named("b")};
  EXPECT_EQ(names(merged_records({same, same, same})), (std::vector<std::string>{"c", "a", "b"}));
}

TEST(RecordOrder, TwoStagesRecordsInterleaveKeepingEachStagesOrder) {
  // Stage 0: its input and block, then the tied embedding's gradient; stage 1: its block, the
  // loss, its own gradient, then the tied one's.
  const auto merged = merged_records({{named("input_ids"), named("blocks.0"), named("tok_emb")},
                                      {named("blocks.1"), named("loss"), named("ln_f"), named("tok_emb")}});
  EXPECT_EQ(names(merged), (std::vector<std::string>{"input_ids", "blocks.0", "blocks.1", "loss", "ln_f", "tok_emb"}));
}

TEST(RecordOrder, ContradictingOrdersAndRecordsPlacedDifferentlyAreRefusedByName) {
  try {
    merged_records({{named("a"), named("b")}, {named("b"), named("a")}});
    ADD_FAILURE() << "contradicting orders were merged";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("contradicting orders"), std::string::npos) << e.what();
  }
  try {
    merged_records({{named("a")}, {named("a", {Placement::shard(0)})}});
    ADD_FAILURE() << "one record placed two ways was merged";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 and rank 1 place step 0, forward, a activation differently "
                                         "([replicate] on \"\", [shard(0)] on \"\")"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace magic
