// Property tests of the three-pool layout (RapidCheck). Valid layouts and batches are generated
// directly (every drawn case runs: pool sizes meeting the batch contract, non-square included)
// and match the reference at fp64 precision; invalid ones have their own property: rejected
// before any rank starts, with a message naming the violated constraint. Ranks are threads of
// this process (every rank sees the same case). Both properties count the cases that ran.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <numeric>

#include "checks/run_check.h"
#include "lib/core/error.h"
#include "tests/properties/counted_property.h"
#include "tests/support.h"

namespace magic {
namespace {

struct PoolSizes {
  int64_t n_ci, n_per_block, n_blocks, n_ppgd;
  int64_t world() const { return n_ci + n_blocks * n_per_block + n_ppgd; }
  std::string topology() const {
    return "n_ci=" + std::to_string(n_ci) + ",n_per_block=" + std::to_string(n_per_block) +
           ",n_blocks=" + std::to_string(n_blocks) + ",n_ppgd=" + std::to_string(n_ppgd);
  }
};

bool nested(int64_t a, int64_t b) {
  return a % b == 0 || b % a == 0;
}

// The batch contract, written from its definition: every pool splits the batch evenly, and the CI
// pool's shards and each other pool's shards divide each other (B/a | B/b or B/b | B/a, which for
// a batch all pools divide is a | b or b | a).
bool meets_contract(const PoolSizes& p, int64_t batch) {
  const bool splits = batch % p.n_ci == 0 && batch % p.n_per_block == 0 && batch % p.n_ppgd == 0;
  auto shards_nest = [&](int64_t a, int64_t b) {
    return (batch / a) % (batch / b) == 0 || (batch / b) % (batch / a) == 0;
  };
  return splits && shards_nest(p.n_ci, p.n_per_block) && shards_nest(p.n_ci, p.n_ppgd);
}

// Every layout with pools of 1..4 ranks, 1..3 blocks and at most 9 ranks (threads on a 2-core
// machine) whose pool sizes nest; a valid batch exists for each (their lcm).
std::vector<PoolSizes> nesting_layouts() {
  std::vector<PoolSizes> out;
  for (int64_t ci = 1; ci <= 4; ++ci)
    for (int64_t pb = 1; pb <= 4; ++pb)
      for (int64_t nb = 1; nb <= 3; ++nb)
        for (int64_t pp = 1; pp <= 4; ++pp) {
          const PoolSizes p{ci, pb, nb, pp};
          if (p.world() <= 9 && nested(ci, pb) && nested(ci, pp)) out.push_back(p);
        }
  return out;
}

TEST(ThreePoolProperties, ValidLayoutsMatchTheReference) {
  static const std::vector<PoolSizes> layouts = nesting_layouts();
  testing::check_counted("valid three-pool layouts match the reference", [] {
    const PoolSizes p = *rc::gen::elementOf(layouts);
    const int64_t lcm = std::lcm(std::lcm(p.n_ci, p.n_per_block), p.n_ppgd);
    const int64_t batch = lcm * *rc::gen::inRange<int64_t>(1, std::max<int64_t>(2, 24 / lcm + 1));
    RC_ASSERT(meets_contract(p, batch));  // the generator's own promise
    checks::CheckSettings s;
    s.topology = dist::TopologySpec::parse(p.topology());
    s.batch_size = batch;
    s.steps = *rc::gen::inRange<int64_t>(1, 3);
    s.seed = *rc::gen::inRange<uint64_t>(0, 1000);
    RC_CLASSIFY(p.n_ci != p.n_per_block || p.n_ci != p.n_ppgd, "non-square");
    s.validate();
    checks::CheckRequest request;
    request.settings = s;
    const CheckReport report = testing::run_check_in_threads(request);
    for (const auto& row : report.rows) {
      if (!row.passed) RC_LOG() << row.level << "/" << row.tensor << ": " << row.diagnosis.text << "\n";
    }
    RC_ASSERT(!report.rows.empty());
    RC_ASSERT(report.rows_pass());
  });
}

TEST(ThreePoolProperties, InvalidLayoutsAreRejectedNamingTheConstraint) {
  // Drawn at full size: inRange shrinks its range with RapidCheck's size, and at the first case's
  // size 0 every draw meets the contract, so a short run (10 cases) gave up discarding.
  const auto any = [](int64_t lo, int64_t hi) { return *rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, hi)); };
  testing::check_counted("invalid three-pool batches are rejected", [&] {
    const PoolSizes p{any(1, 7), any(1, 7), any(1, 4), any(1, 7)};
    const int64_t batch = any(1, 49);
    RC_PRE(!meets_contract(p, batch));  // cheap to discard: no rank runs
    const bool splits = batch % p.n_ci == 0 && batch % p.n_per_block == 0 && batch % p.n_ppgd == 0;
    checks::CheckSettings s;
    s.topology = dist::TopologySpec::parse(p.topology());
    s.batch_size = batch;
    const std::string error = testing::input_error_of([&] { s.validate(); });
    RC_ASSERT(!error.empty());
    RC_ASSERT(error.find(splits ? "must divide each other" : "does not split evenly") != std::string::npos);
  });
}

}  // namespace
}  // namespace magic
