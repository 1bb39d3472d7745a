// Property tests of the mesh pipeline with context parallelism and sharded parameters
// (RapidCheck). Each case draws dp, cp and fsdp (fsdp | dp, world = dp·cp <= 8), a sequence length
// (some not divisible by 2·cp: padded), a global batch (uneven and empty row shards), steps,
// optimizer, checkpoint schedule and seed; runs the case on real Gloo ranks (threads) and the
// reference, and compares every level. Every drawn case is valid and runs; the count of cases
// that ran is asserted (counted_property.h).
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "lib/core/strings.h"
#include "tests/properties/counted_property.h"
#include "tests/properties/property_support.h"
#include "tests/support.h"

namespace magic {
namespace {

checks::CheckSettings random_mesh_settings() {
  checks::CheckSettings s;
  const int64_t cp = *rc::gen::inRange<int64_t>(1, 5);
  const int64_t dp = *rc::gen::inRange<int64_t>(1, 8 / cp + 1);
  std::vector<int64_t> divisors;  // 1: no sharding, dp: full, in between: hybrid
  for (int64_t f = 1; f <= dp; ++f) {
    if (dp % f == 0) divisors.push_back(f);
  }
  const int64_t shards = *rc::gen::elementOf(divisors);
  s.topology = dist::TopologySpec::parse(str_cat("dp=", dp, ",cp=", cp, ",fsdp=", shards));
  s.max_len = *rc::gen::element<int64_t>(8, 10, 12, 16);
  s.steps = *rc::gen::inRange<int64_t>(1, 4);
  s.optimizer = *rc::gen::element<std::string>("sgd", "adam", "adamw");
  s.checkpoints = *rc::gen::element<std::string>("all", "sqrt", "log");
  s.seed = *rc::gen::inRange<uint64_t>(0, 1000);
  s.documents = 6;
  RC_CLASSIFY(cp > 1, "cp");
  RC_CLASSIFY(shards > 1 && shards == dp, "full sharding");
  RC_CLASSIFY(shards > 1 && shards < dp, "hybrid sharding");
  RC_CLASSIFY(s.max_len % (2 * cp) != 0, "padded sequence");
  return s;
}

TEST(MeshProperties, SumConventionEqualsTheReferenceOnEveryLayout) {
  testing::check_counted("mesh: sum convention equals the reference", [] {
    checks::CheckSettings s = random_mesh_settings();
    s.batch_size = *rc::gen::inRange<int64_t>(1, 12);
    RC_CLASSIFY(s.batch_size % s.topology.dp() != 0, "uneven row shards");
    const CheckReport report = testing::run_threads(s);
    RC_LOG() << s.topology.str() << " max_len " << s.max_len << " batch " << s.batch_size << "\n"
             << testing::failures(report);
    RC_ASSERT(report.rows_pass());
  });
}

TEST(MeshProperties, AvgConventionIsExactExactlyWhenEveryRankHoldsTheSameLabelCount) {
  testing::check_counted("mesh: avg convention is exact exactly when label counts are equal", [] {
    checks::CheckSettings s = random_mesh_settings();
    RC_PRE(s.topology.world_size() > 1);
    s.convention = dist::Convention::kAvg;
    s.levels = {checks::Level::kGrad};
    const int64_t dp = s.topology.dp();
    s.batch_size = *rc::gen::oneOf(rc::gen::map(rc::gen::inRange<int64_t>(1, 4), [dp](int64_t k) { return k * dp; }),
                                   rc::gen::inRange<int64_t>(dp, 13));
    const bool equal = testing::label_counts_equal(s);
    RC_CLASSIFY(equal, "equal label counts");
    const CheckReport report = testing::run_threads(s);
    RC_LOG() << s.topology.str() << " max_len " << s.max_len << " batch " << s.batch_size << "\n"
             << testing::failures(report);
    RC_ASSERT(!report.rows.empty());
    RC_ASSERT(report.rows_pass() == equal);
  });
}

}  // namespace
}  // namespace magic
