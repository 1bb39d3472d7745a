// The encoder/LM bridge's layout string (lib/distributed/runtime/bridge_topology.h): its canonical
// form and kind, each rule's refusal naming the input, and magic-check's --explain-layout of it:
// the documented example (docs/magic-check.md, "Encoder and language model: the bridge") is the
// tool's output, and its bridge groups follow the documented rule; a run on it is refused with
// exit code 2 until the multimodal workload exists.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/bridge_topology.h"
#include "tests/support.h"

namespace magic {
namespace {

using dist::BridgeKind;
using dist::BridgeTopology;

TEST(BridgeTopology, ParsesBothSidesAndNamesItsKind) {
  const BridgeTopology fan_in = BridgeTopology::parse("enc=tp2,dp4;lm=tp2,dp2,cp2");
  EXPECT_EQ(fan_in.kind(), BridgeKind::kFanIn);
  EXPECT_EQ(fan_in.ratio(), 2);
  EXPECT_EQ(fan_in.world_size(), 8);
  EXPECT_EQ(fan_in.str(), "enc=tp2,dp4;lm=tp2,dp2,cp2");
  const BridgeTopology fan_out = BridgeTopology::parse("lm=cp2,dp4,tp1;enc=dp2,tp4,order=tp-dp");
  EXPECT_EQ(fan_out.kind(), BridgeKind::kFanOut);
  EXPECT_EQ(fan_out.str(), "enc=tp4,dp2;lm=dp4,cp2");
  EXPECT_EQ(BridgeTopology::parse("enc=dp2;lm=dp2").kind(), BridgeKind::kEqual);
  EXPECT_EQ(BridgeTopology::parse("enc=dp4,fsdp2;lm=dp2,cp2,fsdp2").str(), "enc=dp4,fsdp2;lm=dp2,cp2,fsdp2");
  EXPECT_TRUE(dist::is_bridge_topology("enc=dp2;lm=dp2"));
  EXPECT_FALSE(dist::is_bridge_topology("dp=2,cp=2"));
  EXPECT_FALSE(dist::is_bridge_topology("n_ci=2,n_per_block=1"));
}

TEST(BridgeTopology, EachRuleRefusesNamingTheInput) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"enc=dp2,cp2;lm=dp4", "enc: cp2 is not supported"},
      {"enc=tp2,dp2;lm=dp2", "the two sides need one world"},
      {"enc=dp2;lm=dp3", "the two sides need one world"},
      {"enc=dp2,tp3;lm=dp3,tp2", "neither dp divides the other"},
      {"enc=dp4;lm=order=dp-cp-tp,dp2,cp2", "rank order 'dp-cp-tp' is not supported"},
      {"enc=dp4,sp;lm=dp4", "enc: unknown item 'sp'"},
      {"enc=dp4;lm=dp0,cp2", "'dp0' is not dp followed by an integer >= 1"},
      {"enc=dp4,dp4;lm=dp4", "enc: dp given twice"},
      {"enc=dp4", "no lm= side"},
      {"enc=dp4;lm=dp4;enc=dp4", "enc= given twice"},
      {"enc=dp3,fsdp2;lm=dp3", "enc: fsdp2 must divide dp3"},
      {"enc=dp2;vision=dp2", "'vision=dp2' is neither enc=... nor lm=..."},
      // UBSan's finding through fuzz.topology: the product overflowed int64 before this bound.
      {"enc=tp999999992,dp22147483648;lm=dp2", "enc: tp999999992 x dp22147483648 x cp1 is more than the 2147483647"},
  };
  for (const auto& [text, why] : cases) {
    try {
      BridgeTopology::parse(text);
      ADD_FAILURE() << text << " was accepted";
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("--topology '" + text + "'"), std::string::npos) << message;
      EXPECT_NE(message.find(why), std::string::npos) << message;
      EXPECT_NE(message.find("expected enc=tpA,dpB"), std::string::npos) << message;
    }
  }
}

TEST(BridgeTopology, ABatchBothSidesSplitIsAMultipleOfTheLargerDp) {
  const BridgeTopology t = BridgeTopology::parse("enc=tp2,dp4;lm=tp2,dp2,cp2");
  EXPECT_NO_THROW(t.check_batch(8, "--batch"));
  for (int64_t rows : {2, 6, 9}) {
    try {
      t.check_batch(rows, "--batch");
      ADD_FAILURE() << rows << " rows accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(str_cat("--batch: ", rows, " rows cannot be split")), std::string::npos)
          << e.what();
    }
  }
}

testing::CommandOutcome magic_check(const std::string& args) {
  return testing::run_command(std::string(MAGIC_CHECK_BINARY) + " " + args);
}

const std::string kExample = "enc=tp2,dp4;lm=tp2,dp2,cp2";

std::string documented_example() {
  return testing::documented_output("docs/magic-check.md",
                                    "$ magic-check --topology '" + kExample + "' --explain-layout");
}

TEST(BridgeTopology, ExplainLayoutPrintsTheDocumentedExampleWhoseBridgeGroupsFollowTheRule) {
  const std::string shown = documented_example();
  ASSERT_NE(shown, "") << "docs/magic-check.md lost its bridge --explain-layout example";
  const testing::CommandOutcome o = magic_check("--topology '" + kExample + "' --explain-layout");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output, shown);
  // The table: rank, enc dp, enc tp, lm dp, cp, lm tp, bridge group, ...; fan-in's rule: the
  // bridge group is every rank of the same lm dp index and encoder tp index. Rank order: encoder
  // rank = enc_dp*2 + enc_tp; lm rank = (lm_dp*2 + cp)*2 + lm_tp.
  std::map<int, std::vector<int64_t>> coordinates;
  std::map<int, std::string> bridge;
  std::istringstream lines(o.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    std::vector<std::string> cell;
    for (std::string c; cells >> c;) cell.push_back(c);
    if (cell.size() != 12 || !std::isdigit(static_cast<unsigned char>(cell[0][0]))) continue;
    const int rank = std::stoi(cell[0]);
    for (int i = 1; i <= 5; ++i) coordinates[rank].push_back(std::stoll(cell[i]));
    bridge[rank] = cell[6];
  }
  ASSERT_EQ(coordinates.size(), 8u) << o.output;
  for (const auto& [rank, x] : coordinates) {
    EXPECT_EQ(rank, x[0] * 2 + x[1]) << "encoder rank order";
    EXPECT_EQ(rank, (x[2] * 2 + x[3]) * 2 + x[4]) << "lm rank order";
    std::vector<std::string> members;
    for (const auto& [other, y] : coordinates) {
      if (y[2] == x[2] && y[1] == x[1]) members.push_back(std::to_string(other));
    }
    EXPECT_EQ(bridge[rank], join(members, ",")) << "rank " << rank;
  }
}

// With fsdp on a side, two more columns: each side's shard group, the ranks of the same tp (and
// cp) index whose dp indices share a block of fsdp (shard index = dp index % fsdp).
TEST(BridgeTopology, ExplainLayoutOfAShardedBridgeNamesEachSidesShardGroup) {
  const testing::CommandOutcome o = magic_check("--topology 'enc=tp2,dp4,fsdp2;lm=tp2,dp2,cp2,fsdp2' --explain-layout");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::map<int, std::vector<int64_t>> coordinates;
  std::map<int, std::pair<std::string, std::string>> shard;
  std::istringstream lines(o.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    std::vector<std::string> cell;
    for (std::string c; cells >> c;) cell.push_back(c);
    if (cell.size() != 14 || !std::isdigit(static_cast<unsigned char>(cell[0][0]))) continue;
    const int rank = std::stoi(cell[0]);
    for (int i = 1; i <= 5; ++i) coordinates[rank].push_back(std::stoll(cell[i]));
    shard[rank] = {cell[12], cell[13]};
  }
  ASSERT_EQ(coordinates.size(), 8u) << o.output;
  for (const auto& [rank, x] : coordinates) {
    std::vector<std::string> enc, lm;
    for (const auto& [other, y] : coordinates) {
      if (y[1] == x[1] && y[0] / 2 == x[0] / 2) enc.push_back(std::to_string(other));
      if (y[4] == x[4] && y[3] == x[3] && y[2] / 2 == x[2] / 2) lm.push_back(std::to_string(other));
    }
    EXPECT_EQ(shard[rank].first, join(enc, ",")) << "rank " << rank;
    EXPECT_EQ(shard[rank].second, join(lm, ",")) << "rank " << rank;
  }
}

TEST(BridgeTopology, TheCliRefusesABadBridgeWithExitCode2) {
  for (const char* flags : {" --explain-layout", ""}) {
    const testing::CommandOutcome bad = magic_check(std::string("--topology 'enc=dp2,cp2;lm=dp4'") + flags);
    EXPECT_EQ(bad.exit_code, 2) << bad.output;
    EXPECT_NE(bad.output.find("enc: cp2 is not supported"), std::string::npos) << bad.output;
  }
}

}  // namespace
}  // namespace magic
