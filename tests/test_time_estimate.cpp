// The up-front time estimate's arithmetic and wording (time_estimate.h); the calibration itself
// runs in every magic-run test.
#include <gtest/gtest.h>

#include "lib/train/time_estimate.h"

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

}  // namespace
}  // namespace magic
