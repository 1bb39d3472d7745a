// REPLAY's progress in a run's folder, so that an interrupted run continues where it stopped.
// Progress is one number, p, the segments done (the latest first); a per-query run's queries
// advance together (one pass, replay_backward.h). After each segment REPLAY records every query's
// λ and partial dQ/dw (replay-<p>.safetensors); the record with p equal to the segment count holds
// the finished scores. The two latest records are kept: ranks killed at different moments are at
// most one segment apart, and all of them continue from the least progress any of them recorded.
#pragma once

#include <string>

#include "lib/train/replay_backward.h"

namespace magic {

class ReplayJournal {
 public:
  ReplayJournal(std::string folder, int64_t segments, int64_t queries);

  int64_t segments() const { return segments_; }
  // The most progress recorded in the folder (0: none).
  int64_t latest() const;
  // The record at `progress` (1 .. segments) as REPLAY's starting point, verified: every query's
  // λ and dQ/dw, or an InputError naming the record and what it lacks.
  ReplayResume resume(int64_t progress) const;

  void record(const ReplayResume& after) const;

 private:
  std::string path(int64_t progress) const;
  // Records are sealed with the folder and their name (sealed_file.h): verified when read back.
  std::string seal_for(int64_t progress) const;
  // Removes records older than the one before `progress`.
  void prune_before(int64_t progress) const;

  std::string folder_;
  int64_t segments_;
  int64_t queries_;
};

}  // namespace magic
