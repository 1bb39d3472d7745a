// Records of the ranks other than 0 reach rank 0's server through the run's store (c10d's
// TCPStore, which every rank already reaches): a rank's relay thread writes batches of messages
// under keys of its own, rank 0's relay thread reads and removes them. No collective is involved,
// so tracing never joins the run's order of collectives, and a slow store loses records (counted),
// never stalls a rank. The control goes the other way: rank 0 writes it, the others poll for it.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "lib/live/trace_control.h"
#include "lib/live/trace_event.h"

namespace magic {

// On a rank other than 0: an output that queues the rank's records (at most `queue_bytes`; more
// are dropped and counted) and a thread that sends them in batches, and applies the controls
// rank 0 publishes through `apply_control`.
class RelaySender : public TraceOutput {
 public:
  RelaySender(c10::intrusive_ptr<c10d::Store> store, int64_t rank, std::function<void(TraceControl)> apply_control,
              size_t queue_bytes = size_t{8} << 20);
  ~RelaySender() override;

  void publish(const std::shared_ptr<const TraceEvent>& event) override;
  // Sends what is queued, then marks this rank done (rank 0 waits for the mark).
  void finish();
  int64_t dropped() const { return dropped_; }

 private:
  void loop();
  void send_batch(std::deque<std::shared_ptr<const std::string>>& batch);

  c10::intrusive_ptr<c10d::Store> store_;
  const int64_t rank_;
  std::function<void(TraceControl)> apply_control_;
  const size_t queue_bytes_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<const std::string>> queue_;
  size_t bytes_ = 0;
  std::atomic<int64_t> dropped_{0};
  bool stopping_ = false;
  int64_t batches_ = 0;
  int64_t control_version_ = 0;
  std::thread thread_;
};

// On rank 0: a thread that reads the other ranks' batches and publishes each record to `target`
// (the server); publish_control() hands a new control to the other ranks.
class RelayReceiver {
 public:
  RelayReceiver(c10::intrusive_ptr<c10d::Store> store, int64_t world, TraceOutput* target);
  ~RelayReceiver();

  void publish_control(const TraceControl& control);
  // Waits up to `limit_ms` for every rank's done mark, relaying what they sent, then stops.
  void finish(int limit_ms = 5000);

 private:
  void loop();
  bool poll();  // true when every rank is done and read

  c10::intrusive_ptr<c10d::Store> store_;
  const int64_t world_;
  TraceOutput* target_;
  std::vector<int64_t> read_;  // batches read per rank
  std::mutex control_mutex_;
  int64_t control_version_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace magic
