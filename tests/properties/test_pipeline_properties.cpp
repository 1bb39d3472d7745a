// Property test of pipeline stages and ring attention on the mesh (RapidCheck): each case draws pp
// (1 to 4, mostly more than 1) and vpp (1 or 2 with pp; the built-in model has one layer a
// chunk), the schedule (1F1B or GPipe), dp, cp (with cp > 1 ring attention or gathered keys), tp
// and fsdp with world = pp·dp·cp·tp <= 8, micro-batches the schedule can run, a batch that gives
// every replica a row per micro-batch, steps, optimizer, checkpoint schedule and seed; runs it on
// Gloo ranks (threads) beside the reference and compares every level at fp64. Every drawn case is
// valid and runs; the count that ran is asserted (counted_property.h): 20 in the default suite
// (its own ctest entry), 500 under the long label.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "lib/core/strings.h"
#include "tests/properties/counted_property.h"
#include "tests/properties/property_support.h"
#include "tests/support.h"

namespace magic {
namespace {

TEST(PipelineProperties, EveryPipelinedOrRingLayoutEqualsTheReference) {
  testing::check_counted("pipeline and ring: every layout equals the reference", [] {
    checks::CheckSettings s;
    const int64_t pp = *rc::gen::element<int64_t>(1, 2, 2, 3, 4);
    const int64_t vpp = pp > 1 ? *rc::gen::element<int64_t>(1, 2) : 1;
    const int64_t tp = *rc::gen::element<int64_t>(1, 2);
    const int64_t cp = *rc::gen::inRange<int64_t>(1, std::max<int64_t>(1, 8 / pp / tp) + 1);
    const int64_t dp = *rc::gen::inRange<int64_t>(1, 8 / pp / tp / cp + 1);
    std::vector<int64_t> divisors;
    for (int64_t f = 1; f <= dp; ++f) {
      if (dp % f == 0) divisors.push_back(f);
    }
    const int64_t shards = *rc::gen::elementOf(divisors);
    const bool gpipe = *rc::gen::arbitrary<bool>();
    const bool ring = cp > 1 && *rc::gen::arbitrary<bool>();
    // 1F1B needs pp micro-batches at least, and with vpp a multiple of pp; GPipe any.
    const int64_t mb = gpipe     ? *rc::gen::inRange<int64_t>(1, 5)
                       : vpp > 1 ? pp * *rc::gen::inRange<int64_t>(1, 3)
                                 : *rc::gen::inRange<int64_t>(pp, pp + 3);
    s.topology = dist::TopologySpec::parse(str_cat("dp=", dp, ",cp=", cp, ",tp=", tp, ",fsdp=", shards, ",pp=", pp,
                                                   ",vpp=", vpp, ",mb=", mb, ring ? ",cp_impl=ring" : ""));
    s.topology.schedule = gpipe ? "gpipe" : "1f1b";
    s.batch_size = dp * mb + *rc::gen::inRange<int64_t>(0, dp + 1);  // a row per micro-batch, some uneven
    s.max_len = *rc::gen::element<int64_t>(8, 10, 12);
    s.steps = *rc::gen::inRange<int64_t>(1, 3);
    s.optimizer = *rc::gen::element<std::string>("sgd", "adam", "adamw");
    s.checkpoints = *rc::gen::element<std::string>("all", "sqrt", "log");
    s.seed = *rc::gen::inRange<uint64_t>(0, 1000);
    s.documents = 6;
    RC_CLASSIFY(pp > 1, "pp");
    RC_CLASSIFY(ring, "ring");
    RC_CLASSIFY(vpp > 1, "vpp");
    RC_CLASSIFY(gpipe, "gpipe");
    RC_CLASSIFY(cp > 1, "cp");
    RC_CLASSIFY(tp > 1, "tp");
    RC_CLASSIFY(shards > 1, "fsdp");
    RC_CLASSIFY(s.batch_size % dp != 0, "uneven row shards");
    const CheckReport report = testing::run_threads(s);
    RC_LOG() << s.topology.str() << " " << s.topology.schedule << " max_len " << s.max_len << " batch " << s.batch_size
             << "\n"
             << testing::failures(report);
    RC_ASSERT(!report.rows.empty());
    RC_ASSERT(report.rows_pass());
  });
}

}  // namespace
}  // namespace magic
