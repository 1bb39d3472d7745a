// Progress of one of magic-check's own long loops in the launching process (the reference runs
// and the clip norm's gradients, before any rank starts): silent while the loop is quick, then a
// line on stderr every few seconds with the rate and the time left, and a closing line. Each step
// also checks for SIGINT/SIGTERM (lib/core/stop_signal.h), so a stopped check ends with exit 2.
//   reference (fp64): 1200/4000 steps (30%), 41.3 steps/s, ETA 1m08s
#pragma once

#include <cstdint>
#include <string>

#include "lib/train/progress_meter.h"

namespace magic::checks {

class PhaseProgress {
 public:
  PhaseProgress(std::string label, int64_t total);
  // `done` of the total steps finished; throws StopRequested after SIGINT or SIGTERM.
  void update(int64_t done);
  // The closing line, if any progress line was shown.
  void finish();

 private:
  std::string label_;
  int64_t total_;
  ProgressMeter meter_;
};

}  // namespace magic::checks
