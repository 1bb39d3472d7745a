#include "lib/train/segment_walker.h"

#include <stdexcept>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/train/binomial_checkpointing.h"

namespace magic {

SegmentWalker::SegmentWalker(const StepFunction& step, const CheckpointStore& store, at::Tensor w,
                             int64_t first_segment)
    : step_(step), store_(store), w_(w.detach()), next_segment_(first_segment) {}

bool SegmentWalker::done() const {
  return !can_trace() && !ahead_ && next_segment_ < 0;
}

bool SegmentWalker::Segment::ready() const {
  return next >= begin && ((working && working->step == next) || (!held.empty() && held.back().step == next));
}

bool SegmentWalker::can_trace() const {
  return current_ && current_->ready();
}

TracedStep SegmentWalker::trace() {
  if (!can_trace()) throw std::logic_error("SegmentWalker::trace: no state is ready to trace");
  Segment& s = *current_;
  const int64_t t = s.next--;
  TrainState state;
  if (s.working && s.working->step == t) {
    state = std::move(s.working->state);
    s.working.reset();
  } else {
    state = std::move(s.held.back().state);
    s.held.pop_back();
  }
  promote();
  return trace_step(step_, state, t, w_);
}

void SegmentWalker::advance(Segment& s) const {
  const Held& top = s.held.back();
  const Held& base = s.working ? *s.working : top;
  // Reversing steps top.step .. next with the slots left: store at top.step + m (F's recursion).
  const int64_t length = s.next - top.step + 1;
  const int64_t free = s.slots - (static_cast<int64_t>(s.held.size()) - 1);
  const int64_t m = first_store(length, std::max<int64_t>(free, 0));
  const int64_t store_at = free > 0 && m < length ? top.step + m : -1;
  Held next{base.step + 1, step_.step(base.state, base.step, w_, /*traced=*/false).next};
  if (next.step == store_at) {
    s.held.push_back(std::move(next));
    s.working.reset();
  } else {
    s.working = std::move(next);
  }
}

int64_t SegmentWalker::segment_length(int64_t k) const {
  const std::vector<int64_t>& checkpoints = store_.steps();
  const auto i = static_cast<size_t>(k);
  return (i + 1 < checkpoints.size() ? checkpoints[i + 1] : step_.num_steps()) - checkpoints[i];
}

bool SegmentWalker::can_recompute() const {
  if (current_ && !current_->ready()) return true;  // a budgeted segment reaching its next step
  if (ahead_) return !ahead_->ready();
  if (next_segment_ < 0) return false;
  // Start the next segment (length L) once at most L/2 of the current one are left to trace:
  // early enough that it is complete when they are, without holding two whole segments.
  const int64_t untraced = current_ ? current_->next - current_->begin + 1 : 0;
  return 2 * untraced <= segment_length(next_segment_);
}

void SegmentWalker::recompute_one() {
  if (!can_recompute()) throw std::logic_error("SegmentWalker::recompute_one: nothing to recompute");
  if (current_ && !current_->ready()) {
    advance(*current_);
  } else if (!ahead_) {
    const int64_t k = next_segment_--;
    Segment s;
    s.begin = store_.steps()[static_cast<size_t>(k)];
    s.end = s.begin + segment_length(k);
    s.next = s.end - 1;
    s.slots = store_.segment_slots();
    if (s.end - s.begin > 1) dist::set_phase(str_cat("REPLAY: recomputing from the checkpoint before step ", s.begin));
    s.held.push_back({s.begin, step_.restore(store_.load(s.begin), s.begin)});
    ahead_ = std::move(s);
  } else {
    advance(*ahead_);
  }
  promote();
}

int64_t SegmentWalker::states_held() const {
  return store_.states_in_memory() + (current_ ? current_->count() : 0) + (ahead_ ? ahead_->count() : 0);
}

void SegmentWalker::promote() {
  if (current_ && current_->next < current_->begin) current_.reset();
  if (!current_ && ahead_ && ahead_->ready()) {
    current_ = std::move(ahead_);
    ahead_.reset();
  }
}

}  // namespace magic
