// Property tests of the three-pool layout (RapidCheck): random pool sizes (non-square included)
// and batch sizes. A layout and batch that meet the contract match the reference at fp64
// precision; one that does not is rejected before any rank starts, with a message naming the
// violated constraint. Ranks are threads of this process (every rank sees the same case).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "checks/run_check.h"
#include "lib/core/error.h"
#include "tests/support.h"

namespace magic {
namespace {

RC_GTEST_PROP(ThreePoolProperties, ValidLayoutsMatchTheReferenceAndInvalidOnesAreRejected, ()) {
  const int64_t n_ci = *rc::gen::inRange<int64_t>(1, 4), n_per_block = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t n_blocks = *rc::gen::inRange<int64_t>(1, 3), n_ppgd = *rc::gen::inRange<int64_t>(1, 4);
  RC_PRE(n_ci + n_blocks * n_per_block + n_ppgd <= 9);  // threads on a 2-core machine
  checks::CheckSettings s;
  s.topology =
      dist::TopologySpec::parse("n_ci=" + std::to_string(n_ci) + ",n_per_block=" + std::to_string(n_per_block) +
                                ",n_blocks=" + std::to_string(n_blocks) + ",n_ppgd=" + std::to_string(n_ppgd));
  s.batch_size = *rc::gen::inRange<int64_t>(1, 25);
  s.steps = *rc::gen::inRange<int64_t>(1, 3);
  s.seed = *rc::gen::inRange<uint64_t>(0, 1000);
  std::string error;
  try {
    s.validate();
  } catch (const InputError& e) {
    error = e.what();
  }
  const int64_t B = s.batch_size;
  const bool splits = B % n_ci == 0 && B % n_per_block == 0 && B % n_ppgd == 0;
  auto nest = [&](int64_t a, int64_t b) { return splits && ((B / a) % (B / b) == 0 || (B / b) % (B / a) == 0); };
  const bool valid = splits && nest(n_ci, n_per_block) && nest(n_ci, n_ppgd);
  RC_CLASSIFY(valid, "valid");
  if (!valid) {
    RC_ASSERT(!error.empty());
    RC_ASSERT(error.find(splits ? "must divide each other" : "does not split evenly") != std::string::npos);
    return;
  }
  RC_ASSERT(error.empty());
  checks::CheckRequest request;
  request.settings = s;
  const CheckReport report = testing::run_check_in_threads(request);
  for (const auto& row : report.rows) {
    if (!row.passed) RC_LOG() << row.level << "/" << row.tensor << ": " << row.diagnosis.text << "\n";
  }
  RC_ASSERT(report.rows_pass());
}

}  // namespace
}  // namespace magic
