// Pipelined REPLAY's second thread: it drives a SegmentWalker, tracing the next step whenever the
// one-step slot is empty and recomputing the next segment's states otherwise, while the calling
// thread takes the products of the steps it receives (ReplayBackward). The worker never traces
// ahead of the slot, so at most two steps' graphs exist: the one being consumed and the one
// waiting (or being traced).
//
// Intra-op threads: the worker takes half of them (at least one), the caller the rest for as
// long as the pipeline lives. With one each, every kernel runs as in a one-thread sequential
// REPLAY, so the results are the same bit for bit.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "lib/core/intra_op_threads.h"
#include "lib/train/segment_walker.h"

namespace magic {

class ReplayPipeline {
 public:
  // `walker` must run no collectives (its step's runs_collectives() is false). The intra-op
  // threads are split between the caller and the worker (pipeline_threads) until destruction.
  explicit ReplayPipeline(SegmentWalker walker);
  // Stops the worker at its next step and waits for it.
  ~ReplayPipeline();
  ReplayPipeline(const ReplayPipeline&) = delete;
  ReplayPipeline& operator=(const ReplayPipeline&) = delete;

  // The next traced step, latest first; rethrows what failed on the worker. The previous one
  // must be gone (its product taken) before this is called: it is counted as held until then.
  TracedStep next();
  // The most states held at once: the walker's, the waiting step's and the consumer's.
  int64_t observed_states_held() const;

 private:
  void work(int threads);
  void record_held();  // under mutex_

  SegmentWalker walker_;  // the worker's alone
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<TracedStep> slot_;
  std::exception_ptr failure_;
  bool stop_ = false, finished_ = false, consumer_holds_ = false;
  int64_t walker_held_ = 0, observed_ = 0;
  PipelineThreads threads_;
  IntraOpThreadsScope caller_threads_;
  std::thread worker_;
};

}  // namespace magic
