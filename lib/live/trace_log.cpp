#include "lib/live/trace_log.h"

#include "lib/core/strings.h"

namespace magic {

void TraceLog::line(const std::string& text) {
  if (!emit_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (now - window_start_ >= std::chrono::seconds(1)) {
    flush_locked();
    window_start_ = now;
    lines_in_window_ = 0;
  }
  if (lines_in_window_ < lines_per_second_) {
    ++lines_in_window_;
    emit_(text);
  } else {
    ++withheld_;
  }
}

void TraceLog::flush() {
  if (!emit_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
}

void TraceLog::flush_locked() {
  if (withheld_ == 0) return;
  emit_(str_cat("trace: ", withheld_, " more clients refused or dropped (lines withheld: at most ", lines_per_second_,
                " a second)"));
  withheld_ = 0;
}

}  // namespace magic
