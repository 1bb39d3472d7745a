// Property tests of the mesh pipeline with context, tensor and sequence parallelism, sharded
// parameters and micro-batches (RapidCheck). Each case draws dp, cp, tp and fsdp (fsdp | dp,
// world = dp·cp·tp <= 8), sp where tp > 1 (the SUM property), a sequence length (some not
// divisible by 2·cp·tp: padded), a global batch (uneven and empty row shards) and micro-batches
// that fit it, steps, optimizer, checkpoint schedule and seed; runs the case on real Gloo ranks
// (threads) and the reference, and compares every level. Every drawn case is valid and runs; the count of cases
// that ran is asserted (counted_property.h).
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "lib/core/strings.h"
#include "tests/properties/counted_property.h"
#include "tests/properties/property_support.h"
#include "tests/support.h"

namespace magic {
namespace {

// `axes`: also draw tp (1, 2 or 4; the built-in model has lcm(2, tp) heads) and, with tp > 1, sp.
checks::CheckSettings random_mesh_settings(bool tensor_axes) {
  checks::CheckSettings s;
  const int64_t tp = tensor_axes ? *rc::gen::element<int64_t>(1, 1, 2, 4) : 1;
  const bool sp = tp > 1 && *rc::gen::arbitrary<bool>();
  const int64_t cp = *rc::gen::inRange<int64_t>(1, 8 / tp + 1);
  const int64_t dp = *rc::gen::inRange<int64_t>(1, 8 / tp / cp + 1);
  std::vector<int64_t> divisors;  // 1: no sharding, dp: full, in between: hybrid
  for (int64_t f = 1; f <= dp; ++f) {
    if (dp % f == 0) divisors.push_back(f);
  }
  const int64_t shards = *rc::gen::elementOf(divisors);
  s.topology = dist::TopologySpec::parse(str_cat("dp=", dp, ",cp=", cp, ",tp=", tp, ",fsdp=", shards, sp ? ",sp" : ""));
  s.max_len = *rc::gen::element<int64_t>(8, 10, 12, 16);
  s.steps = *rc::gen::inRange<int64_t>(1, 4);
  s.optimizer = *rc::gen::element<std::string>("sgd", "adam", "adamw");
  s.checkpoints = *rc::gen::element<std::string>("all", "sqrt", "log");
  s.seed = *rc::gen::inRange<uint64_t>(0, 1000);
  s.documents = 6;
  RC_CLASSIFY(cp > 1, "cp");
  RC_CLASSIFY(shards > 1 && shards == dp, "full sharding");
  RC_CLASSIFY(shards > 1 && shards < dp, "hybrid sharding");
  RC_CLASSIFY(tp > 1, "tp");
  RC_CLASSIFY(sp, "sp");
  RC_CLASSIFY(s.max_len % (2 * cp * (sp ? tp : 1)) != 0, "padded sequence");
  return s;
}

TEST(MeshProperties, SumConventionEqualsTheReferenceOnEveryLayout) {
  testing::check_counted("mesh: sum convention equals the reference", [] {
    checks::CheckSettings s = random_mesh_settings(true);
    s.batch_size = *rc::gen::inRange<int64_t>(1, 12);
    RC_CLASSIFY(s.batch_size % s.topology.dp() != 0, "uneven row shards");
    // Micro-batches that fit every replica's rows (each gets at least one).
    const int64_t fits = std::min<int64_t>(3, s.batch_size / s.topology.dp());
    if (fits >= 2) {
      const int64_t mb = *rc::gen::inRange<int64_t>(1, fits + 1);
      if (mb > 1) s.topology = dist::TopologySpec::parse(str_cat(s.topology.str(), ",mb=", mb));
      RC_CLASSIFY(mb > 1, "micro-batches");
    }
    const CheckReport report = testing::run_threads(s);
    RC_LOG() << s.topology.str() << " max_len " << s.max_len << " batch " << s.batch_size << "\n"
             << testing::failures(report);
    RC_ASSERT(report.rows_pass());
  });
}

TEST(MeshProperties, AvgConventionIsExactExactlyWhenEveryRankHoldsTheSameLabelCount) {
  testing::check_counted("mesh: avg convention is exact exactly when label counts are equal", [] {
    checks::CheckSettings s = random_mesh_settings(false);
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
