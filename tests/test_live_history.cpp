// The history the tracer's server keeps for clients that come late (lib/live/trace_history.h):
// bounded per series and in bytes after many records, the first and the latest point of each
// series kept, the order of arrival kept; and the series a record message belongs to.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lib/live/trace_event.h"
#include "lib/live/trace_history.h"

namespace magic {
namespace {

std::shared_ptr<const std::string> text(const std::string& s) {
  return std::make_shared<const std::string>(s);
}

std::vector<std::string> kept(const TraceHistory& h) {
  std::vector<std::string> out;
  for (const auto& m : h.messages()) out.push_back(*m);
  return out;
}

TEST(TraceHistory, KeepsAStrideOfEachSeriesWithItsFirstAndLatestInOrder) {
  HistoryLimits limits;
  limits.points_per_series = 8;
  TraceHistory h(limits);
  // 1000 points of a long series, with a short one between them every 125.
  for (int i = 0; i < 1000; ++i) {
    h.add("loss", text("loss " + std::to_string(i)));
    if (i % 125 == 0) h.add("update", text("update " + std::to_string(i / 125)));
  }
  EXPECT_EQ(h.seen(), 1008);
  // The rule, written out: the stride is the smallest power of two at which the points on it
  // among indices 0..999 number at most 8: floor(999 / s) + 1 <= 8 gives s = 128, so 0, 128,
  // ..., 896 (eight), and the latest, 999.
  // The eight of "update", within the bound, are all kept; interleaved as they came (update
  // i/125 just after loss i).
  std::vector<std::string> in_order;
  for (int i = 0; i < 1000; ++i) {
    if (i % 128 == 0 || i == 999) in_order.push_back("loss " + std::to_string(i));
    if (i % 125 == 0) in_order.push_back("update " + std::to_string(i / 125));
  }
  EXPECT_EQ(kept(h), in_order);
  EXPECT_EQ(h.kept_of("loss"), 9u);
  EXPECT_EQ(h.kept_of("update"), 8u);
  EXPECT_EQ(h.kept(), 17u);
}

TEST(TraceHistory, StaysWithinItsBoundsAfterManyRecords) {
  HistoryLimits limits;
  limits.points_per_series = 64;
  limits.bytes = 8000;  // below five series of 65 points: the budget thins them too
  limits.series = 5;
  TraceHistory h(limits);
  size_t most = 0;
  for (int i = 0; i < 100000; ++i) {
    const std::string series = "s" + std::to_string(i % 7);  // seven series: two are never kept
    h.add(series, text(series + " " + std::to_string(i) + std::string(40, '.')));
    most = std::max(most, h.bytes());
    for (int s = 0; s < 7; ++s) ASSERT_LE(h.kept_of("s" + std::to_string(s)), 65u);
  }
  EXPECT_LE(most, limits.bytes);
  EXPECT_EQ(h.kept_of("s5"), 0u);
  EXPECT_EQ(h.kept_of("s6"), 0u);
  // Each kept series still starts at its first record and ends at its latest.
  const std::vector<std::string> all = kept(h);
  for (int s = 0; s < 5; ++s) {
    const std::string prefix = "s" + std::to_string(s) + " ";
    std::vector<std::string> of_series;
    for (const std::string& m : all) {
      if (m.rfind(prefix, 0) == 0) of_series.push_back(m.substr(prefix.size(), m.find('.') - prefix.size()));
    }
    ASSERT_GE(of_series.size(), 2u);
    EXPECT_EQ(of_series.front(), std::to_string(s));
    EXPECT_EQ(of_series.back(), std::to_string(99995 + s));  // 99999 = 7 * 14285 + 4
  }
}

TEST(TraceHistory, TheSeriesHoldingTheMostBytesGivesWayAndAMessageOverTheBudgetIsNotKept) {
  HistoryLimits limits;
  limits.bytes = 1000;
  TraceHistory h(limits);
  for (int i = 0; i < 4; ++i) h.add("small", text(std::string(10, 'a' + i)));
  for (int i = 0; i < 10; ++i) h.add("big", text(std::string(100, 'k')));
  // 40 + 1000 bytes: "big" thins (its stride doubles) while "small" keeps all four.
  EXPECT_EQ(h.kept_of("small"), 4u);
  EXPECT_LT(h.kept_of("big"), 10u);
  EXPECT_LE(h.bytes(), 1000u);
  h.add("huge", text(std::string(5000, 'h')));
  EXPECT_EQ(h.kept_of("huge"), 0u);
  EXPECT_EQ(h.kept_of("small"), 4u);
  EXPECT_LE(h.bytes(), 1000u);
}

TEST(TraceHistory, ARecordsSeriesIsItsNameWhateverItsStepAndTheFinalScoresAreTheirOwn) {
  const nlohmann::json at_step = {
      {"type", "record"}, {"run", "r"},     {"rank", 1}, {"kind", "loss"}, {"phase", "train"},     {"order", "f"},
      {"layer", ""},      {"name", "loss"}, {"step", 3}, {"seq", 7},       {"compressor", "none"}, {"data", {}}};
  nlohmann::json later = at_step;
  later["step"] = 9;
  later["seq"] = 40;
  later["data"] = {{"values", {1.5}}};
  EXPECT_EQ(series_key(at_step), series_key(later));
  for (const char* field : {"run", "kind", "phase", "order", "layer", "name", "compressor"}) {
    nlohmann::json other = at_step;
    other[field] = "x";
    EXPECT_NE(series_key(other), series_key(at_step)) << field;
  }
  nlohmann::json rank = at_step;
  rank["rank"] = 2;
  EXPECT_NE(series_key(rank), series_key(at_step));
  nlohmann::json final_scores = at_step;
  final_scores["step"] = -1;
  EXPECT_NE(series_key(final_scores), series_key(at_step));
  EXPECT_EQ(TraceEvent::make(at_step)->series, series_key(at_step));
  EXPECT_EQ(TraceEvent::make({{"type", "control"}})->series, "");
}

}  // namespace
}  // namespace magic
