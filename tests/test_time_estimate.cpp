// The up-front time estimate's arithmetic and wording (time_estimate.h); the calibration itself
// runs in every magic-run test.
#include <gtest/gtest.h>

#include "lib/train/time_estimate.h"
#include "tests/support.h"

namespace magic {
namespace {

// --validate lds retrains S + 1 times, each as long as training: 33 x 2.5 s = 82.5 s = 1m23s.
TEST(TimeEstimate, CountsLdsRetrainingsOnlyWhenThereAreAny) {
  TimeEstimate e;
  e.step_seconds = 0.3;
  e.vjp_seconds = 0.5;
  e.training = 2.5;
  e.replay = 7.5;
  EXPECT_EQ(e.str(), "training about 2.5s, REPLAY about 7.5s (calibration: 0.3s a step, 0.5s a step's VJP)");
  e.add_retrainings(33);
  EXPECT_DOUBLE_EQ(e.lds, 82.5);
  EXPECT_EQ(e.str(),
            "training about 2.5s, REPLAY about 7.5s, LDS about 1m23s for 33 retrainings (calibration: 0.3s a step, "
            "0.5s a step's VJP)");
}

// --retrace-per-query traces each step K times (once per batch of products): REPLAY counts K traces
// a step, sequential, and K − 1 of them on the caller's side when pipelined (the calibration's own
// timings, so the arithmetic is what is checked).
TEST(TimeEstimate, CountsATraceForEachBatchOfProductsTracedAgain) {
  const LmProblem p = testing::tiny_lm_problem({});
  const double n = static_cast<double>(p.step->num_steps()), M = 2, R = 4, K = 3;
  const TimeEstimate one = estimate_time(*p.step, p.initial, p.weights, 2, 4, ReplayMode::kSequential, 3);
  ASSERT_GT(one.trace_seconds, 0.0);
  EXPECT_DOUBLE_EQ(one.replay, n * (K * one.trace_seconds + R * one.back_seconds) + M * one.step_seconds);
  const TimeEstimate two = estimate_time(*p.step, p.initial, p.weights, 2, 4, ReplayMode::kPipelined, 3);
  EXPECT_GE(two.replay, n * (R * two.back_seconds + (K - 1) * two.trace_seconds));
}

}  // namespace
}  // namespace magic
