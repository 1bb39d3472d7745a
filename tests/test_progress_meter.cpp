// Progress a person can follow: off a terminal, one line per interval with the rate and the time
// left, nothing in between, and a closing summary; on a terminal a bar redrawn in place.
#include <gtest/gtest.h>

#include <sstream>

#include "lib/train/progress_meter.h"

namespace magic {
namespace {

TEST(ProgressMeter, PrintsALineEveryIntervalWithRateAndEtaThenASummary) {
  double now = 100.0;
  std::ostringstream out;
  ProgressMeter meter("training", 1500, out, /*terminal=*/false, 5.0, [&] { return now; });
  now = 102.0;
  meter.update(200);  // 2 s: within the interval, nothing printed
  EXPECT_EQ(out.str(), "");
  now = 106.0;
  meter.update(600);  // 6 s, 100 steps/s, 900 left: 9 s
  EXPECT_EQ(out.str(), "training: 600/1500 steps (40%), 100.0 steps/s, ETA 9.0s\n");
  now = 107.0;
  meter.update(700);
  now = 250.0;
  meter.update(1500);
  meter.finish();
  meter.update(1500);  // after the summary: ignored
  EXPECT_EQ(out.str(),
            "training: 600/1500 steps (40%), 100.0 steps/s, ETA 9.0s\n"
            "training: 1500/1500 steps (100%), 10.0 steps/s, ETA 0.0s\n"
            "training: 1500 steps in 2m30s (10.0 steps/s)\n");
}

// A resumed phase counts only this process's steps in the rate: 300 done before, 300 more in 6 s.
TEST(ProgressMeter, AResumedPhaseRatesOnlyTheStepsTakenHere) {
  double now = 0.0;
  std::ostringstream out;
  ProgressMeter meter("REPLAY", 1000, out, /*terminal=*/false, 5.0, [&] { return now; });
  meter.resume_at(300);
  now = 6.0;
  meter.update(600);  // 50 steps/s, 400 left: 8 s
  now = 10.0;
  meter.update(1000);
  meter.finish();
  EXPECT_EQ(out.str(),
            "REPLAY: 600/1000 steps (60%), 50.0 steps/s, ETA 8.0s\n"
            "REPLAY: 700 steps in 10.0s, resumed at 300 of 1000 (70.0 steps/s)\n");
}

TEST(ProgressMeter, NamesWhatItCounts) {
  double now = 0.0;
  std::ostringstream out;
  ProgressMeter meter("LDS", 17, out, /*terminal=*/false, 5.0, [&] { return now; });
  meter.counting("retrainings");
  now = 8.5;
  meter.update(17);
  meter.finish();
  EXPECT_EQ(out.str(),
            "LDS: 17/17 retrainings (100%), 2.0 retrainings/s, ETA 0.0s\n"
            "LDS: 17 retrainings in 8.5s (2.0 retrainings/s)\n");
}

// A slow unit reads as the time each takes, not "0.0 retrainings/s": 3 retrainings in 37.5 s.
TEST(ProgressMeter, ASlowUnitShowsTheTimeEachTakes) {
  double now = 0.0;
  std::ostringstream out;
  ProgressMeter meter("LDS", 33, out, /*terminal=*/false, 5.0, [&] { return now; });
  meter.counting("retrainings");
  now = 6.0;
  meter.update(0);  // none finished yet: no rate to give
  now = 37.5;
  meter.update(3);  // 12.5 s each, 30 left: 6m15s
  now = 412.0;
  meter.update(33);
  meter.finish();
  EXPECT_EQ(out.str(),
            "LDS: 0/33 retrainings (0%), ?s a retraining, ETA ?\n"
            "LDS: 3/33 retrainings (9%), 12.5s a retraining, ETA 6m15s\n"
            "LDS: 33/33 retrainings (100%), 12.5s a retraining, ETA 0.0s\n"
            "LDS: 33 retrainings in 6m52s (12.5s a retraining)\n");
  EXPECT_EQ(format_rate(1, 1, "steps"), "1.0 steps/s");  // one a second or more: a rate
  EXPECT_EQ(format_rate(2, 250, "retrainings"), "2m05s a retraining");
}

// A per-query REPLAY says its steps are queries x steps.
TEST(ProgressMeter, SaysWhatTheTotalIsMadeOf) {
  double now = 0.0;
  std::ostringstream out;
  ProgressMeter meter("REPLAY", 32, out, /*terminal=*/false, 5.0, [&] { return now; });
  meter.made_of("4 queries x 8 steps");
  now = 6.0;
  meter.update(12);  // 2 steps/s, 20 left: 10 s
  now = 16.0;
  meter.update(32);
  meter.finish();
  EXPECT_EQ(out.str(),
            "REPLAY: 12/32 steps (4 queries x 8 steps; 37%), 2.0 steps/s, ETA 10.0s\n"
            "REPLAY: 32/32 steps (4 queries x 8 steps; 100%), 2.0 steps/s, ETA 0.0s\n"
            "REPLAY: 32 steps (of 4 queries x 8 steps) in 16.0s (2.0 steps/s)\n");
}

TEST(ProgressMeter, RedrawsABarInPlaceOnATerminal) {
  double now = 0.0;
  std::ostringstream out;
  ProgressMeter meter("REPLAY", 40, out, /*terminal=*/true, 5.0, [&] { return now; });
  now = 1.0;
  meter.update(10);
  EXPECT_EQ(out.str(), "\rREPLAY  [#####...............]  10/40 steps  10.0 steps/s  ETA 3.0s\x1b[K");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(65), "1m05s");
}

}  // namespace
}  // namespace magic
