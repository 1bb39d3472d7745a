// The non-smooth-training criterion (training_health.h) on made-up traces: a steady run with a
// warmup and batch noise is smooth; a loss spike and an update-norm jump each fire, naming the step.
#include <gtest/gtest.h>

#include <cmath>

#include "lib/train/training_health.h"

namespace magic {
namespace {

// A smooth AdamW-like run: the loss falls with ±10% batch noise, the rate warms up from 0 over a
// quarter of the run and decays, and the update norm follows the rate.
TrainingTrace smooth_run(int64_t steps = 32) {
  TrainingTrace trace;
  trace.total_steps = steps;
  const int64_t warmup = steps / 4;
  for (int64_t t = 0; t < steps; ++t) {
    const double lr =
        t < warmup
            ? 3e-3 * static_cast<double>(t) / static_cast<double>(warmup)
            : 3e-3 * (1 + std::cos(M_PI * static_cast<double>(t - warmup) / static_cast<double>(steps - warmup))) / 2;
    const double loss = 5.5 - 1.3 * static_cast<double>(t) / static_cast<double>(steps) + (t % 3 == 0 ? 0.4 : -0.3);
    trace.add(t, loss, lr * 40.0 * (t % 2 == 0 ? 1.5 : 1.0), lr);
  }
  return trace;
}

TEST(TrainingHealth, ASteadyRunWithWarmupAndBatchNoiseIsSmooth) {
  const TrainingTrace trace = smooth_run();
  EXPECT_TRUE(judge_training(trace).smooth());
  EXPECT_FALSE(non_smooth_warning(trace).has_value());
  EXPECT_FALSE(non_smooth_warning(TrainingTrace{}).has_value());  // a run resumed after training: nothing seen
}

TEST(TrainingHealth, ALossSpikeIsNamedByStep) {
  TrainingTrace trace = smooth_run();
  trace.losses[20] = 9.0;  // step 21, 1-based; the lowest before it is the 4.428 of step 20
  trace.losses[21] = 7.5;
  const TrainingHealth h = judge_training(trace);
  EXPECT_EQ(h.loss_spikes, (std::vector<int64_t>{20, 21}));
  EXPECT_TRUE(h.update_jumps.empty());
  const std::string warning = non_smooth_warning(trace).value_or("");
  EXPECT_NE(warning.find("the training loss spiked above 1.5x its lowest so far at steps 21, 22 of 32 (worst 9.000 "
                         "at step 21, 2.0x the 4.428 of step 20)"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("first-order scores may not predict retraining; check them with --validate lds"),
            std::string::npos)
      << warning;
  EXPECT_EQ(warning.find('\n'), std::string::npos);  // one line
}

TEST(TrainingHealth, AnUpdateNormJumpIsNamedByStepAndTheRateIsDividedOut) {
  TrainingTrace trace = smooth_run();
  trace.update_norms[12] *= 30;  // step 13: 30x its usual size at the same rate
  const TrainingHealth h = judge_training(trace);
  EXPECT_TRUE(h.loss_spikes.empty());
  EXPECT_EQ(h.update_jumps, (std::vector<int64_t>{12}));
  const std::string warning = non_smooth_warning(trace).value_or("");
  EXPECT_NE(warning.find("the update norm per unit learning rate jumped above 10x its median so far at step 13 of 32"),
            std::string::npos)
      << warning;
  // The same norm from a rate 30 times as large is no jump: the step was meant to be that long.
  trace.learning_rates[12] *= 30;
  EXPECT_TRUE(judge_training(trace).smooth());
}

TEST(TrainingHealth, LongListsOfStepsAreCut) {
  TrainingTrace trace;
  trace.total_steps = 12;
  for (int64_t t = 0; t < 12; ++t) trace.add(t, t < 2 ? 2.0 : 10.0, 1.0, 1.0);
  const std::string warning = non_smooth_warning(trace).value_or("");
  EXPECT_NE(warning.find("at steps 3, 4, 5, 6, 7 and 5 more of 12"), std::string::npos) << warning;
}

}  // namespace
}  // namespace magic
