#include "lib/live/trace_relay.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "lib/core/strings.h"

namespace magic {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);
constexpr size_t kBatchBytes = size_t{1} << 20;

std::string batch_key(int64_t rank, int64_t index) {
  return str_cat("magic-trace/r", rank, "/b", index);
}
std::string count_key(int64_t rank) {
  return str_cat("magic-trace/r", rank, "/batches");
}
std::string done_key(int64_t rank) {
  return str_cat("magic-trace/r", rank, "/done");
}
const char* const kControlKey = "magic-trace/control";
const char* const kControlVersionKey = "magic-trace/control-version";

std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace

RelaySender::RelaySender(c10::intrusive_ptr<c10d::Store> store, int64_t rank,
                         std::function<void(TraceControl)> apply_control, size_t queue_bytes)
    : store_(std::move(store)), rank_(rank), apply_control_(std::move(apply_control)), queue_bytes_(queue_bytes) {
  thread_ = std::thread([this] { loop(); });
}

RelaySender::~RelaySender() {
  finish();
}

void RelaySender::publish(const std::shared_ptr<const TraceEvent>& event) {
  if (!event->record) return;  // rank 0 speaks for the run: its own hello, controls and end
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes_ + event->text.size() > queue_bytes_) {
    ++dropped_;
    return;
  }
  bytes_ += event->text.size();
  queue_.push_back(std::shared_ptr<const std::string>(event, &event->text));
  wake_.notify_one();
}

void RelaySender::send_batch(std::deque<std::shared_ptr<const std::string>>& batch) {
  if (batch.empty()) return;
  std::string blob;
  for (const auto& m : batch) blob += *m + "\n";
  batch.clear();
  store_->set(batch_key(rank_, batches_), bytes_of(blob));
  ++batches_;
  store_->add(count_key(rank_), 1);
}

void RelaySender::loop() {
  // A store that fails (rank 0 gone) ends the relay, never the rank: the run reports its peers.
  try {
    for (;;) {
      std::deque<std::shared_ptr<const std::string>> batch;
      bool stopping = false;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait_for(lock, kPoll, [&] { return stopping_ || !queue_.empty(); });
        size_t size = 0;
        while (!queue_.empty() && size < kBatchBytes) {
          size += queue_.front()->size();
          bytes_ -= queue_.front()->size();
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        stopping = stopping_ && queue_.empty();
      }
      send_batch(batch);
      const int64_t version = store_->add(kControlVersionKey, 0);
      if (version != control_version_) {
        control_version_ = version;
        const std::vector<uint8_t> text = store_->get(kControlKey);
        apply_control_(parse_control(nlohmann::json::parse(std::string(text.begin(), text.end()))));
      }
      if (stopping) break;
    }
    store_->set(done_key(rank_), bytes_of(std::to_string(batches_)));
  } catch (const std::exception&) {
  }
}

void RelaySender::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

RelayReceiver::RelayReceiver(c10::intrusive_ptr<c10d::Store> store, int64_t world, TraceOutput* target)
    : store_(std::move(store)), world_(world), target_(target), read_(world, 0) {
  thread_ = std::thread([this] { loop(); });
}

RelayReceiver::~RelayReceiver() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void RelayReceiver::publish_control(const TraceControl& control) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  try {
    store_->set(kControlKey, bytes_of(control_json(control).dump()));
    store_->add(kControlVersionKey, 1);
  } catch (const std::exception&) {
  }
}

bool RelayReceiver::poll() {
  bool all_done = true;
  for (int64_t r = 1; r < world_; ++r) {
    // The done mark is set after the last batch is counted: seen first, the count read next is final.
    const bool done = store_->check({done_key(r)});
    const int64_t sent = store_->add(count_key(r), 0);
    for (; read_[r] < sent; ++read_[r]) {
      const std::string key = batch_key(r, read_[r]);
      const std::vector<uint8_t> blob = store_->get(key);
      store_->deleteKey(key);
      size_t begin = 0;
      const std::string text(blob.begin(), blob.end());
      while (begin < text.size()) {
        const size_t end = text.find('\n', begin);
        const std::string line = text.substr(begin, end - begin);
        begin = end == std::string::npos ? text.size() : end + 1;
        if (line.empty()) continue;
        auto e = std::make_shared<TraceEvent>();
        e->record = true;
        e->text = line;  // relayed as sent; parsed only for the series the server's history keeps it under
        const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (record.is_object()) e->series = series_key(record);
        target_->publish(e);
      }
    }
    all_done = all_done && done;
  }
  return all_done;
}

void RelayReceiver::loop() {
  try {
    while (!stopping_) {
      poll();
      std::this_thread::sleep_for(kPoll);
    }
  } catch (const std::exception&) {
  }
}

void RelayReceiver::finish(int limit_ms) {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  try {
    while (!poll() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(kPoll);
  } catch (const std::exception&) {
  }
}

}  // namespace magic
