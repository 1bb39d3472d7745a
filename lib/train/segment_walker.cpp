#include "lib/train/segment_walker.h"

#include <stdexcept>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"

namespace magic {

SegmentWalker::SegmentWalker(const StepFunction& step, const CheckpointStore& store, at::Tensor w,
                             int64_t first_segment)
    : step_(step), store_(store), w_(w.detach()), next_segment_(first_segment) {}

bool SegmentWalker::done() const {
  return !can_trace() && !ahead_ && next_segment_ < 0;
}

bool SegmentWalker::can_trace() const {
  return current_ && !current_->states.empty();
}

TracedStep SegmentWalker::trace() {
  if (!can_trace()) throw std::logic_error("SegmentWalker::trace: no state is ready to trace");
  const int64_t t = current_->begin + static_cast<int64_t>(current_->states.size()) - 1;
  TrainState state = std::move(current_->states.back());
  current_->states.pop_back();
  promote();
  return trace_step(step_, state, t, w_);
}

int64_t SegmentWalker::segment_length(int64_t k) const {
  const std::vector<int64_t>& checkpoints = store_.steps();
  const auto i = static_cast<size_t>(k);
  return (i + 1 < checkpoints.size() ? checkpoints[i + 1] : step_.num_steps()) - checkpoints[i];
}

bool SegmentWalker::can_recompute() const {
  if (ahead_) return !ahead_->complete();
  if (next_segment_ < 0) return false;
  // Start the next segment (length L) once at most L/2 of the current one are left to trace:
  // early enough that it is complete when they are, without holding two whole segments.
  const int64_t untraced = current_ ? static_cast<int64_t>(current_->states.size()) : 0;
  return 2 * untraced <= segment_length(next_segment_);
}

void SegmentWalker::recompute_one() {
  if (!can_recompute()) throw std::logic_error("SegmentWalker::recompute_one: nothing to recompute");
  if (!ahead_) {
    const int64_t k = next_segment_--;
    Segment s;
    s.begin = store_.steps()[static_cast<size_t>(k)];
    s.end = s.begin + segment_length(k);
    if (s.end - s.begin > 1) dist::set_phase(str_cat("REPLAY: recomputing from the checkpoint before step ", s.begin));
    s.states.push_back(step_.restore(store_.load(s.begin), s.begin));
    ahead_ = std::move(s);
  } else {
    const int64_t t = ahead_->begin + static_cast<int64_t>(ahead_->states.size()) - 1;
    ahead_->states.push_back(step_.step(ahead_->states.back(), t, w_, /*traced=*/false).next);
  }
  promote();
}

int64_t SegmentWalker::states_held() const {
  return store_.count() +
         static_cast<int64_t>((current_ ? current_->states.size() : 0) + (ahead_ ? ahead_->states.size() : 0));
}

void SegmentWalker::promote() {
  if (current_ && current_->states.empty()) current_.reset();
  if (!current_ && ahead_ && ahead_->complete()) {
    current_ = std::move(ahead_);
    ahead_.reset();
  }
}

}  // namespace magic
