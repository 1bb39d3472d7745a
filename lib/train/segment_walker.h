// REPLAY's states, latest first, from its checkpoints: the states of a segment (from one
// checkpoint to the next) are recomputed forward, untraced, and each is then traced once, from
// the segment's last step back to its first. Segments are taken latest first too, and at most one
// is recomputed ahead of the one being traced, started once at most half its length of the
// current one is left to trace. Under a memory budget (CheckpointStore::segment_slots) a segment
// holds at most that many states beside its first and a working state: to reach the step to
// trace, the working state advances from the nearest held state below it, storing on the way
// where binomial checkpointing says (binomial_checkpointing.h); unbounded, every state is stored. Whoever drives the
// walker picks the order of the two kinds of work: sequential REPLAY recomputes only when there is nothing to trace
// (one segment held); the pipeline's thread recomputes the next segment while the current one's traced steps wait to be
// consumed (replay_pipeline.h).
#pragma once

#include <optional>
#include <vector>

#include "lib/step/step_function.h"
#include "lib/train/checkpoint_store.h"
#include "lib/train/replay_backward.h"

namespace magic {

class SegmentWalker {
 public:
  // Segments first_segment .. 0 of the store's checkpoints (segment k starts at checkpoint k).
  SegmentWalker(const StepFunction& step, const CheckpointStore& store, at::Tensor w, int64_t first_segment);

  bool done() const;            // every step traced
  bool can_trace() const;       // the latest untraced step's state is held
  TracedStep trace();           // traces it; its state leaves the walker
  bool can_recompute() const;   // a state of the next segment is to be computed, and may be now
  void recompute_one();         // computes it (a segment's first state is loaded from its checkpoint)
  int64_t states_held() const;  // checkpoints plus the states held here (traced steps not counted)

 private:
  struct Held {
    int64_t step = 0;
    TrainState state;
  };
  struct Segment {
    int64_t begin = 0, end = 0;  // steps begin .. end-1
    int64_t next = 0;            // the next step to trace: end-1 down to begin
    int64_t slots = 0;           // states it may hold beside its first
    std::vector<Held> held;      // increasing steps; held[0] is begin's until begin is traced
    std::optional<Held> working;
    bool ready() const;  // next's state is held
    int64_t count() const { return static_cast<int64_t>(held.size()) + (working ? 1 : 0); }
  };
  // One recomputed step of `s`: the working state advanced, stored where the schedule says.
  void advance(Segment& s) const;
  // A recomputed segment becomes the current one once the current one is traced.
  void promote();
  int64_t segment_length(int64_t k) const;  // steps in segment k

  const StepFunction& step_;
  const CheckpointStore& store_;
  at::Tensor w_;
  int64_t next_segment_;            // the next segment to start recomputing; -1 when none is left
  std::optional<Segment> current_;  // complete, being traced from its back
  std::optional<Segment> ahead_;    // being recomputed
};

}  // namespace magic
