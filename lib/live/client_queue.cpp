#include "lib/live/client_queue.h"

#include "lib/core/strings.h"

namespace magic {

std::string dropped_message(int64_t count, int64_t total) {
  return str_cat("{\"type\":\"dropped\",\"count\":", count, ",\"total\":", total, "}");
}

ClientQueue::Push ClientQueue::push(std::shared_ptr<const std::string> message, bool record) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t size = message->size();
  if (record && bytes_ + size > capacity_) {
    ++dropped_since_notice_;
    ++dropped_total_;
    return Push::kDropped;
  }
  if (!record && bytes_ + size > 2 * capacity_) return Push::kOverflow;
  // The notice of dropped records goes before the next message queued after them, so the
  // client learns of a gap where it is.
  if (dropped_since_notice_ > 0) {
    auto notice = std::make_shared<const std::string>(dropped_message(dropped_since_notice_, dropped_total_));
    bytes_ += notice->size();
    messages_.push_back(std::move(notice));
    dropped_since_notice_ = 0;
  }
  bytes_ += size;
  messages_.push_back(std::move(message));
  return Push::kQueued;
}

std::optional<std::shared_ptr<const std::string>> ClientQueue::pop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (messages_.empty() && dropped_since_notice_ > 0) {
    // Records dropped with nothing queued after them: the notice goes now, not at the next push.
    const int64_t count = dropped_since_notice_;
    dropped_since_notice_ = 0;
    return std::make_shared<const std::string>(dropped_message(count, dropped_total_));
  }
  if (messages_.empty()) return std::nullopt;
  std::shared_ptr<const std::string> m = std::move(messages_.front());
  messages_.pop_front();
  bytes_ -= m->size();
  return m;
}

int64_t ClientQueue::dropped_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_total_;
}

size_t ClientQueue::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace magic
