// One client's outgoing messages: bounded in bytes, so a client that reads slowly or not at all
// costs the run a fixed amount of memory and never blocks it. Records that do not fit are dropped
// and counted; the next message the client takes is then a "dropped" notice with that count
// (docs/tracer.md). Other messages (hello, control, error, end) are small and always kept, up to
// a hard limit past which the client is given up on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace magic {

class ClientQueue {
 public:
  explicit ClientQueue(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  enum class Push { kQueued, kDropped, kOverflow };
  // kOverflow: a non-record message found the queue at twice its capacity: drop the client.
  Push push(std::shared_ptr<const std::string> message, bool record);

  // The next message to send, in the order pushed.
  std::optional<std::shared_ptr<const std::string>> pop();

  int64_t dropped_total() const;
  size_t bytes() const;

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<std::shared_ptr<const std::string>> messages_;
  size_t bytes_ = 0;
  int64_t dropped_since_notice_ = 0;
  int64_t dropped_total_ = 0;
};

// {"type": "dropped", "count": ..., "total": ...}
std::string dropped_message(int64_t count, int64_t total);

}  // namespace magic
