// Property test of the multimodal workload on bridge layouts (RapidCheck): each case draws a
// colocated encoder and language-model layout of up to 8 ranks (enc tpA x dpB = lm tpC x dpD x cpE,
// B and D nested: fan-in, fan-out or equal; each side's fsdp a divisor of its dp), a batch both
// sides split, a sequence length, 1 or 2 steps,
// optimizer, checkpoint schedule and seed; runs it on real Gloo ranks (threads) against the
// single process with no bridge, every level. Every drawn layout is valid and runs; the count of
// cases that ran is asserted (counted_property.h).
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "lib/core/strings.h"
#include "tests/properties/counted_property.h"
#include "tests/properties/property_support.h"
#include "tests/support.h"

namespace magic {
namespace {

struct Sides {
  int64_t A, B, C, D, E;  // enc tp, enc dp; lm tp, lm dp, lm cp
};

// Every bridge layout of 2..8 ranks the workload takes: lm tp in {1, 2, 4} (the built-in model
// has lcm(2, tp) heads), cp <= 4 (2·cp chunks of the shortest sequence drawn, 8 columns of text).
const std::vector<Sides>& all_layouts() {
  static const std::vector<Sides> layouts = [] {
    std::vector<Sides> out;
    for (int64_t n = 2; n <= 8; ++n) {
      for (int64_t A = 1; A <= n; ++A) {
        if (n % A != 0) continue;
        for (int64_t C : {1, 2, 4}) {
          for (int64_t E = 1; E <= 4; ++E) {
            if (n % (C * E) != 0) continue;
            const int64_t B = n / A, D = n / (C * E);
            if (B % D == 0 || D % B == 0) out.push_back({A, B, C, D, E});
          }
        }
      }
    }
    return out;
  }();
  return layouts;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t k = 1; k <= n; ++k) {
    if (n % k == 0) out.push_back(k);
  }
  return out;
}

TEST(BridgeProperties, EveryLayoutOfTheTwoModelsEqualsTheSingleProcess) {
  EXPECT_GE(all_layouts().size(), 50u);
  testing::check_counted("bridge: the multimodal workload equals the single process", [] {
    const Sides l = *rc::gen::elementOf(all_layouts());
    // Parameters sharded on either side: the clip's joint norm pairs each side's shard group.
    const int64_t enc_fsdp = *rc::gen::elementOf(divisors(l.B)), lm_fsdp = *rc::gen::elementOf(divisors(l.D));
    checks::CheckSettings s;
    s.topology = dist::TopologySpec::parse(
        str_cat("enc=tp", l.A, ",dp", l.B, ",fsdp", enc_fsdp, ";lm=tp", l.C, ",dp", l.D, ",cp", l.E, ",fsdp", lm_fsdp));
    s.batch_size = *rc::gen::inRange<int64_t>(1, 3) * std::max(l.B, l.D);
    s.max_len = *rc::gen::element<int64_t>(8, 10, 12);
    s.steps = *rc::gen::inRange<int64_t>(1, 3);
    s.optimizer = *rc::gen::element<std::string>("sgd", "adam", "adamw");
    s.checkpoints = *rc::gen::element<std::string>("all", "sqrt", "log");
    s.seed = *rc::gen::inRange<uint64_t>(0, 1000);
    s.documents = 8;
    RC_CLASSIFY(l.B > l.D, "fan-in");
    RC_CLASSIFY(l.B < l.D, "fan-out");
    RC_CLASSIFY(l.B == l.D, "equal");
    RC_CLASSIFY(l.E > 1, "lm cp");
    RC_CLASSIFY(l.A > 1, "encoder tp");
    RC_CLASSIFY(l.C > 1, "lm tp");
    RC_CLASSIFY(enc_fsdp > 1, "encoder fsdp");
    RC_CLASSIFY(lm_fsdp > 1, "lm fsdp");
    const CheckReport report = testing::run_threads(s);
    RC_LOG() << s.topology.str() << " batch " << s.batch_size << " max_len " << s.max_len << " " << s.optimizer
             << " steps " << s.steps << " seed " << s.seed << "\n"
             << testing::failures(report);
    RC_ASSERT(report.rows_pass());
  });
}

}  // namespace
}  // namespace magic
