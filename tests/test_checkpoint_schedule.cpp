#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "lib/core/error.h"
#include "lib/train/checkpoint_schedule.h"
#include "lib/train/magic_pipeline.h"
#include "tests/support.h"

namespace magic {
namespace {

TEST(CheckpointSchedule, DesignExamplesForNineSteps) {
  EXPECT_EQ(checkpoint_steps(CheckpointSchedule::kAll, 9), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(checkpoint_steps(CheckpointSchedule::kSqrt, 9), (std::vector<int64_t>{0, 3, 6, 7, 8}));
  EXPECT_EQ(checkpoint_steps(CheckpointSchedule::kLog, 9), (std::vector<int64_t>{0, 4, 6, 7, 8}));
}

TEST(CheckpointSchedule, OneStep) {
  for (auto s : {CheckpointSchedule::kAll, CheckpointSchedule::kSqrt, CheckpointSchedule::kLog}) {
    EXPECT_EQ(checkpoint_steps(s, 1), (std::vector<int64_t>{0}));
  }
}

TEST(CheckpointSchedule, ParseRejectsUnknownNames) {
  EXPECT_EQ(parse_checkpoint_schedule("sqrt"), CheckpointSchedule::kSqrt);
  EXPECT_THROW(parse_checkpoint_schedule("every"), InputError);
}

RC_GTEST_PROP(CheckpointSchedule, StrictlyIncreasingFromZeroAndEndingWithEveryStep, ()) {
  const int64_t n = *rc::gen::inRange<int64_t>(1, 5000);
  for (auto s : {CheckpointSchedule::kAll, CheckpointSchedule::kSqrt, CheckpointSchedule::kLog}) {
    const auto steps = checkpoint_steps(s, n);
    RC_ASSERT(steps.front() == 0);
    RC_ASSERT(steps.back() == n - 1);  // the last step is always checkpointed
    for (size_t i = 1; i < steps.size(); ++i) RC_ASSERT(steps[i] > steps[i - 1]);
  }
}

RC_GTEST_PROP(CheckpointSchedule, SqrtHoldsAboutTwoSqrtNAndSegmentsAreShort, ()) {
  const int64_t n = *rc::gen::inRange<int64_t>(1, 100000);
  const auto steps = checkpoint_steps(CheckpointSchedule::kSqrt, n);
  const int64_t c = isqrt(n);
  // ceil((N - c) / c) strided checkpoints plus c every-step ones.
  RC_ASSERT(static_cast<int64_t>(steps.size()) <= 2 * c + 1);
  for (size_t i = 1; i < steps.size(); ++i) RC_ASSERT(steps[i] - steps[i - 1] <= c);
}

RC_GTEST_PROP(CheckpointSchedule, LogHoldsLogarithmicallyMany, ()) {
  const int64_t n = *rc::gen::inRange<int64_t>(1, 1000000);
  const auto steps = checkpoint_steps(CheckpointSchedule::kLog, n);
  // Each checkpoint halves the remaining distance (or steps by one once it is below 2).
  RC_ASSERT(static_cast<double>(steps.size()) <= 2.0 * std::log2(static_cast<double>(n) + 1.0) + 2.0);
}

TEST(Isqrt, ExactAroundPerfectSquares) {
  for (int64_t r = 0; r < 2000; ++r) {
    EXPECT_EQ(isqrt(r * r), r);
    if (r > 0) {
      EXPECT_EQ(isqrt(r * r - 1), r - 1);
    }
  }
}

// The estimate of REPLAY's peak states (the memory check before a run) equals what REPLAY counts
// while it runs, for every schedule, in memory and spilled; `all` needs no schedule to be built.
TEST(CheckpointSchedule, PeakStatesHeldIsWhatReplayHolds) {
  for (auto schedule : {CheckpointSchedule::kAll, CheckpointSchedule::kSqrt, CheckpointSchedule::kLog}) {
    for (bool spilled : {false, true}) {
      testing::TinyRun run;
      run.checkpoints = checkpoint_schedule_name(schedule);
      run.steps = 7;
      const LmProblem p = testing::tiny_lm_problem(run);
      MagicOptions options;
      options.schedule = schedule;
      if (spilled) options.spill_dir = ::testing::TempDir();
      const MagicResult r = run_magic(*p.step, *p.query, p.initial, p.weights, options);
      // Spilled checkpoints are on disk: neither counts them among the states held in memory.
      EXPECT_EQ(peak_states_held(schedule, 7, spilled), r.peak_states_held)
          << checkpoint_schedule_name(schedule) << (spilled ? " spilled" : "");
    }
  }
  EXPECT_EQ(peak_states_held(CheckpointSchedule::kAll, 1000000000000, false), 1000000000001);
  EXPECT_EQ(peak_states_held(CheckpointSchedule::kSqrt, 240, false), 45);  // 30 checkpoints + 15
}

// Pipelined REPLAY holds a segment being recomputed, at most half its length of the segment being
// traced, and two traced steps (replay_mode.h): `all`'s closed form agrees with the count over its
// checkpoints; sqrt on 240 steps holds 15 + 7 + 2.
TEST(CheckpointSchedule, PipelinedPeakHoldsTwoSegmentsAndTwoTracedSteps) {
  for (int64_t n : {1, 2, 7}) {
    for (ReplayMode mode : {ReplayMode::kSequential, ReplayMode::kPipelined}) {
      EXPECT_EQ(peak_states_held(CheckpointSchedule::kAll, n, false, mode),
                n + segment_states_held(checkpoint_steps(CheckpointSchedule::kAll, n), n, mode))
          << n;
    }
  }
  EXPECT_EQ(peak_states_held(CheckpointSchedule::kSqrt, 240, false, ReplayMode::kPipelined), 30 + 15 + 7 + 2);
  EXPECT_EQ(peak_states_held(CheckpointSchedule::kSqrt, 240, true, ReplayMode::kPipelined), 15 + 7 + 2);
  // log on 9 steps: 0 4 6 7 8, segments of 4, 2, 1, 1, 1: segment 0 begun with 2 of segment 1 left.
  EXPECT_EQ(segment_states_held({0, 4, 6, 7, 8}, 9, ReplayMode::kPipelined), 4 + 2 + 2);
  EXPECT_EQ(segment_states_held({0, 4, 6, 7, 8}, 9, ReplayMode::kSequential), 4);
}

}  // namespace
}  // namespace magic
