// What the tracer's server remembers of the records it sent, so that a client that comes late
// sees the run so far (docs/tracer.md, "History"), as TensorBoard-style viewers do. Records are
// kept per series (one record name of one rank of one run, whatever its step), downsampled by
// stride doubling: of a series' points 0, 1, 2, ... those whose index is a multiple of the
// stride 2^j, at most `points_per_series` of them, plus the latest. The first and the latest
// point of a series are kept, and the order of arrival is kept. The messages kept never exceed
// `bytes` in all: over it, the series that holds the most bytes gives way (its stride doubles,
// down to its first and latest point, then those go oldest first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace magic {

struct HistoryLimits {
  size_t points_per_series = 512;  // multiples of the stride; the latest point comes on top
  size_t bytes = size_t{4} << 20;  // the kept messages' bytes, over every series
  size_t series = 4096;            // series remembered; a record of a further one is not kept
};

class TraceHistory {
 public:
  explicit TraceHistory(HistoryLimits limits = {}) : limits_(limits) {}

  // One record message of `series` (in the order sent). Not thread-safe: the server holds a lock.
  void add(const std::string& series, std::shared_ptr<const std::string> message);

  // The kept messages, in the order they were added.
  std::vector<std::shared_ptr<const std::string>> messages() const;

  int64_t seen() const { return seen_; }  // records added in all
  size_t kept() const { return kept_; }
  size_t bytes() const { return bytes_; }
  // Points kept of one series (0 for one never seen): for tests.
  size_t kept_of(const std::string& series) const;

 private:
  struct Point {
    int64_t order = 0;  // arrival over every series
    int64_t index = 0;  // within its series
    std::shared_ptr<const std::string> message;
  };
  struct Series {
    int64_t count = 0;          // points seen
    int64_t stride = 1;         // a power of two
    std::vector<Point> points;  // ascending index; the last may be the latest, off the stride
    size_t bytes = 0;
  };

  // Doubles the stride (again, until a point goes) and drops the points off it but the latest.
  void thin(Series& s);
  void erase_if_off_stride(Series& s);
  void drop_front(Series& s);
  void fit_budget();

  HistoryLimits limits_;
  std::unordered_map<std::string, Series> series_;
  int64_t seen_ = 0;
  size_t kept_ = 0;
  size_t bytes_ = 0;
};

}  // namespace magic
