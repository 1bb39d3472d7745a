#include "lib/train/progress_meter.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "lib/core/strings.h"

namespace magic {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 60) return format_fixed(seconds, 1) + "s";
  const auto whole = static_cast<int64_t>(std::llround(seconds));
  auto two = [](int64_t v) { return (v < 10 ? "0" : "") + std::to_string(v); };
  if (whole < 3600) return std::to_string(whole / 60) + "m" + two(whole % 60) + "s";
  return std::to_string(whole / 3600) + "h" + two(whole % 3600 / 60) + "m";
}

std::string format_rate(double units, double seconds, const std::string& unit) {
  const double rate = seconds > 0 ? units / seconds : 0.0;
  if (rate >= 1) return str_cat(format_fixed(rate, 1), " ", unit, "/s");
  const std::string one = !unit.empty() && unit.back() == 's' ? unit.substr(0, unit.size() - 1) : unit;
  return str_cat(rate > 0 ? format_duration(1 / rate) : "?s", " a ", one);
}

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A terminal is redrawn at most this often.
constexpr double kTerminalInterval = 0.1;
constexpr int kBarWidth = 20;

}  // namespace

ProgressMeter::ProgressMeter(std::string label, int64_t total, std::ostream& out, bool terminal,
                             double interval_seconds, Clock clock)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      terminal_(terminal),
      interval_(terminal ? kTerminalInterval : interval_seconds),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)),
      start_(clock_()),
      last_shown_(start_) {}

std::string ProgressMeter::status(int64_t done, double elapsed) const {
  const double rate = elapsed > 0 ? static_cast<double>(done - resumed_) / elapsed : 0.0;
  const std::string eta = rate > 0 ? format_duration(static_cast<double>(total_ - done) / rate) : "?";
  const std::string counts = str_cat(done, "/", total_, " ", unit_);
  if (!terminal_) {
    return str_cat(label_, ": ", counts, " (", parts_.empty() ? "" : parts_ + "; ",
                   total_ > 0 ? 100 * done / total_ : 100, "%), ",
                   format_rate(static_cast<double>(done - resumed_), elapsed, unit_), ", ETA ", eta);
  }
  const int filled = total_ > 0 ? static_cast<int>(kBarWidth * done / total_) : kBarWidth;
  return str_cat(label_, "  [", std::string(filled, '#'), std::string(kBarWidth - filled, '.'), "]  ", counts,
                 parts_.empty() ? "" : " (" + parts_ + ")", "  ",
                 format_rate(static_cast<double>(done - resumed_), elapsed, unit_), "  ETA ", eta);
}

void ProgressMeter::resume_at(int64_t done) {
  resumed_ = done_ = std::clamp<int64_t>(done, 0, total_);
}

void ProgressMeter::update(int64_t done) {
  if (finished_) return;
  done_ = std::clamp<int64_t>(done, 0, total_);
  const double now = clock_();
  if (now - last_shown_ < interval_) return;
  last_shown_ = now;
  shown_ = true;
  const std::string line = status(done_, now - start_);
  if (terminal_) {
    out_ << '\r' << line << "\x1b[K" << std::flush;
  } else {
    out_ << line << '\n' << std::flush;
  }
}

void ProgressMeter::finish() {
  if (finished_) return;
  finished_ = true;
  if (quiet_when_quick_ && !shown_) return;
  const double elapsed = clock_() - start_;
  if (terminal_) out_ << "\r\x1b[K";
  out_ << label_ << ": " << done_ - resumed_ << " " << unit_ << (parts_.empty() ? "" : " (of " + parts_ + ")") << " in "
       << format_duration(elapsed)
       << (resumed_ > 0 ? str_cat(", resumed at ", resumed_, " of ", total_) : std::string()) << " ("
       << format_rate(static_cast<double>(done_ - resumed_), elapsed, unit_) << ")\n"
       << std::flush;
}

}  // namespace magic
