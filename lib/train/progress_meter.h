// Progress of a long phase (training, REPLAY) for a person watching: on a terminal a bar redrawn
// in place, otherwise a line every few seconds, each with the rate and the time left; and a closing
// summary line. The clock is injectable so tests can drive it.
//   training  [########............]  600/1500 steps  8.1 steps/s  ETA 1m51s
//   training: 600/1500 steps (40%), 8.1 steps/s, ETA 1m51s
//   training: 1500 steps in 3m05s (8.1 steps/s)
//   REPLAY: 12/32 steps (4 queries x 8 steps; 37%), 3.1 steps/s, ETA 6.5s
//   REPLAY: 32 steps (of 4 queries x 8 steps) in 10.2s (3.1 steps/s)
//   LDS: 3/33 retrainings (9%), 12.5s a retraining, ETA 6m15s
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace magic {

// "3m05s", "42.0s", "1h02m"
std::string format_duration(double seconds);

// `units` done in `seconds` as a rate that reads right at any speed: "8.1 steps/s" at one a second
// or more, else the time each takes, "12.5s a retraining" (the unit's singular: its trailing "s"
// dropped); "?s a retraining" before the first is done.
std::string format_rate(double units, double seconds, const std::string& unit);

class ProgressMeter {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic

  ProgressMeter(std::string label, int64_t total, std::ostream& out, bool terminal, double interval_seconds = 5.0,
                Clock clock = {});
  // What is counted ("steps" unless set; "retrainings" for the LDS).
  ProgressMeter& counting(std::string unit) {
    unit_ = std::move(unit);
    return *this;
  }

  // What the total is made of, shown beside the counts: "4 queries x 8 steps" for a per-query REPLAY.
  ProgressMeter& made_of(std::string parts) {
    parts_ = std::move(parts);
    return *this;
  }

  // No closing summary unless a progress line was shown (a loop that may be quick or long).
  ProgressMeter& quiet_when_quick() {
    quiet_when_quick_ = true;
    return *this;
  }

  // A resumed phase: `done` units were finished by an earlier process (not counted in the rate).
  void resume_at(int64_t done);
  // `done` of `total` units finished.
  void update(int64_t done);
  // The closing summary (once; further updates are ignored).
  void finish();

 private:
  std::string status(int64_t done, double elapsed) const;

  std::string label_, unit_ = "steps", parts_;
  int64_t total_;
  std::ostream& out_;
  bool terminal_;
  double interval_;
  Clock clock_;
  double start_, last_shown_;
  int64_t done_ = 0, resumed_ = 0;
  bool finished_ = false, shown_ = false, quiet_when_quick_ = false;
};

}  // namespace magic
