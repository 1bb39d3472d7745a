#include "lib/train/replay_pipeline.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <stdexcept>

namespace magic {

ReplayPipeline::ReplayPipeline(SegmentWalker walker)
    : walker_(std::move(walker)),
      threads_(pipeline_threads(at::get_num_threads())),
      caller_threads_(threads_.caller),
      worker_([this] { work(threads_.worker); }) {}

ReplayPipeline::~ReplayPipeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

TracedStep ReplayPipeline::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  consumer_holds_ = false;
  changed_.wait(lock, [this] { return slot_ || failure_ || finished_; });
  if (failure_) std::rethrow_exception(failure_);
  if (!slot_) throw std::logic_error("ReplayPipeline::next: every step has been traced");
  TracedStep traced = std::move(*slot_);
  slot_.reset();
  consumer_holds_ = true;
  lock.unlock();
  changed_.notify_all();
  return traced;
}

int64_t ReplayPipeline::observed_states_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return observed_;
}

void ReplayPipeline::record_held() {
  observed_ = std::max(observed_, walker_held_ + (slot_ ? 1 : 0) + (consumer_holds_ ? 1 : 0));
}

void ReplayPipeline::work(int threads) {
  try {
    at::set_num_threads(threads);  // this thread's share (OpenMP's thread count is per thread)
    while (true) {
      bool slot_free = false;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (stop_) return;
        if (walker_.done()) {
          finished_ = true;
          break;
        }
        slot_free = !slot_;
        if (!slot_free && !walker_.can_recompute()) {
          // Nothing to do until the consumer takes the waiting step.
          changed_.wait(lock, [this] { return stop_ || !slot_; });
          continue;
        }
      }
      if (slot_free && walker_.can_trace()) {
        TracedStep traced = walker_.trace();
        std::lock_guard<std::mutex> lock(mutex_);
        slot_ = std::move(traced);
        walker_held_ = walker_.states_held();
        record_held();
      } else {
        walker_.recompute_one();
        std::lock_guard<std::mutex> lock(mutex_);
        walker_held_ = walker_.states_held();
        record_held();
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = std::current_exception();
  }
  changed_.notify_all();
}

}  // namespace magic
