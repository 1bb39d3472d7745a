// Property tests of the data-parallel pipeline (RapidCheck). Each case draws a layout and a run
// (dp, global batch, sequence length, steps, optimizer, checkpoint schedule, seed), runs it on dp
// real Gloo ranks (threads of this process, so every rank sees the same generated case) and the
// reference, and compares every level. Every drawn case is valid and runs; the count of cases
// that ran is asserted (counted_property.h). A failure prints RapidCheck's reproduce string.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "tests/properties/counted_property.h"
#include "tests/properties/property_support.h"
#include "tests/support.h"

namespace magic {
namespace {

checks::CheckSettings random_settings(int64_t dp) {
  checks::CheckSettings s;
  s.topology = dist::TopologySpec::parse("dp=" + std::to_string(dp));
  s.steps = *rc::gen::inRange<int64_t>(1, 4);
  s.max_len = *rc::gen::element<int64_t>(4, 8, 16);
  s.optimizer = *rc::gen::element<std::string>("sgd", "adam", "adamw");
  s.checkpoints = *rc::gen::element<std::string>("all", "sqrt", "log");
  s.seed = *rc::gen::inRange<uint64_t>(0, 1000);
  s.documents = 6;
  return s;
}

TEST(DataParallelProperties, SumConventionEqualsTheReferenceForAnySplit) {
  testing::check_counted("sum convention equals the reference for any split", [] {
    const int64_t dp = *rc::gen::inRange<int64_t>(1, 7);
    checks::CheckSettings s = random_settings(dp);
    s.batch_size = *rc::gen::inRange<int64_t>(1, 15);  // uneven and empty shards included
    RC_CLASSIFY(s.batch_size % dp != 0, "uneven shards");
    const CheckReport report = testing::run_threads(s);
    RC_LOG() << testing::failures(report);
    RC_ASSERT(report.rows_pass());
  });
}

TEST(DataParallelProperties, AvgConventionIsExactExactlyWhenShardLabelCountsAreEqual) {
  testing::check_counted("avg convention is exact exactly when label counts are equal", [] {
    const int64_t dp = *rc::gen::inRange<int64_t>(2, 5);
    checks::CheckSettings s = random_settings(dp);
    s.convention = dist::Convention::kAvg;
    s.levels = {checks::Level::kGrad};
    // Whole multiples of dp with 4-token chunks make equal shards likely; other draws make them rare.
    s.batch_size = *rc::gen::oneOf(rc::gen::map(rc::gen::inRange<int64_t>(1, 4), [dp](int64_t k) { return k * dp; }),
                                   rc::gen::inRange<int64_t>(dp, 15));
    const bool equal = testing::label_counts_equal(s);
    RC_CLASSIFY(equal, "equal label counts");
    const CheckReport report = testing::run_threads(s);
    RC_LOG() << testing::failures(report);
    RC_ASSERT(!report.rows.empty());
    RC_ASSERT(report.rows_pass() == equal);
  });
}

}  // namespace
}  // namespace magic
