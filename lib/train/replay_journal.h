// REPLAY's progress in a run's folder, so that an interrupted run continues where it stopped.
// Progress is one number, p = query * segments + segments_done (queries in order, each REPLAYed
// segment by segment, the latest first). After each segment REPLAY records λ and the partial
// dQ/dw (replay-<p>.safetensors); a finished query keeps this rank's dQ/dw (query-<j>.safetensors).
// The two latest partial records are kept: ranks killed at different moments are at most one
// segment apart, and all of them continue from the least progress any of them recorded.
#pragma once

#include <string>

#include "lib/train/replay_backward.h"

namespace magic {

class ReplayJournal {
 public:
  ReplayJournal(std::string folder, int64_t segments);

  int64_t segments() const { return segments_; }
  // The most progress recorded in the folder (0: none).
  int64_t latest() const;
  // A partial record (p not a multiple of segments) as REPLAY's starting point.
  ReplayResume partial(int64_t progress) const;
  at::Tensor finished_query(int64_t query) const;

  void record_partial(int64_t progress, const TrainState& lambda, const at::Tensor& dw) const;
  void record_finished_query(int64_t query, const at::Tensor& dw) const;

 private:
  std::string partial_path(int64_t progress) const;
  std::string query_path(int64_t query) const;
  // Records are sealed with the folder and their name (sealed_file.h): verified when read back.
  std::string seal_for(const std::string& record) const;
  // A record's dw (and, into `rest`, its other tensors), verified.
  at::Tensor load_record(const std::string& path, const std::string& record, TensorTree* rest) const;
  // Removes partial records older than the one before `progress`.
  void prune_before(int64_t progress) const;

  std::string folder_;
  int64_t segments_;
};

}  // namespace magic
