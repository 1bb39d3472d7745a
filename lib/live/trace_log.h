// The tracer's one-line notices of clients refused or dropped, held to a few lines a second: a
// flood of connections must not flood the run's log too. The lines withheld are counted and said
// with the next line that goes out (or at flush()).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace magic {

class TraceLog {
 public:
  TraceLog(std::function<void(const std::string&)> emit, int lines_per_second)
      : emit_(std::move(emit)), lines_per_second_(lines_per_second) {}

  // Any thread.
  void line(const std::string& text);
  // Says how many lines were withheld, if any.
  void flush();

 private:
  void flush_locked();

  std::function<void(const std::string&)> emit_;
  const int lines_per_second_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point window_start_{};
  int lines_in_window_ = 0;
  int64_t withheld_ = 0;
};

}  // namespace magic
