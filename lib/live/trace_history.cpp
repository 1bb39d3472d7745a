#include "lib/live/trace_history.h"

#include <algorithm>

namespace magic {

void TraceHistory::add(const std::string& series, std::shared_ptr<const std::string> message) {
  const int64_t order = seen_++;
  auto it = series_.find(series);
  if (it == series_.end()) {
    if (series_.size() >= limits_.series) return;
    it = series_.emplace(series, Series{}).first;
  }
  Series& s = it->second;
  // The previous latest point, off the stride, is no longer the latest.
  if (!s.points.empty() && s.points.back().index % s.stride != 0) {
    s.bytes -= s.points.back().message->size();
    bytes_ -= s.points.back().message->size();
    --kept_;
    s.points.pop_back();
  }
  const size_t size = message->size();
  s.points.push_back(Point{order, s.count++, std::move(message)});
  s.bytes += size;
  bytes_ += size;
  ++kept_;
  // Every point is on the stride but perhaps the latest.
  const auto on_stride = [&] { return s.points.size() - (s.points.back().index % s.stride != 0 ? 1 : 0); };
  // Index 0 is on every stride: at least one point stays on it.
  while (on_stride() > std::max<size_t>(limits_.points_per_series, 1)) {
    s.stride *= 2;
    erase_if_off_stride(s);
  }
  fit_budget();
}

void TraceHistory::erase_if_off_stride(Series& s) {
  // Never the latest point: it stays until a later one comes.
  size_t kept = 0;
  for (size_t i = 0; i < s.points.size(); ++i) {
    if (i + 1 < s.points.size() && s.points[i].index % s.stride != 0) {
      s.bytes -= s.points[i].message->size();
      bytes_ -= s.points[i].message->size();
      --kept_;
    } else {
      s.points[kept++] = std::move(s.points[i]);
    }
  }
  s.points.resize(kept);
}

void TraceHistory::thin(Series& s) {
  const size_t before = s.points.size();
  // More than two points hold two on the stride below the latest, so doubling ends with one gone.
  while (s.points.size() == before && s.points.size() > 2) {
    s.stride *= 2;
    erase_if_off_stride(s);
  }
}

void TraceHistory::drop_front(Series& s) {
  s.bytes -= s.points.front().message->size();
  bytes_ -= s.points.front().message->size();
  --kept_;
  s.points.erase(s.points.begin());
}

void TraceHistory::fit_budget() {
  while (bytes_ > limits_.bytes) {
    Series* largest = nullptr;
    for (auto& [name, s] : series_) {
      if (largest == nullptr || s.bytes > largest->bytes) largest = &s;
    }
    if (largest->points.size() > 2) {
      thin(*largest);
    } else {
      drop_front(*largest);
    }
  }
}

std::vector<std::shared_ptr<const std::string>> TraceHistory::messages() const {
  std::vector<const Point*> points;
  points.reserve(kept_);
  for (const auto& [name, s] : series_) {
    for (const Point& p : s.points) points.push_back(&p);
  }
  std::sort(points.begin(), points.end(), [](const Point* a, const Point* b) { return a->order < b->order; });
  std::vector<std::shared_ptr<const std::string>> out;
  out.reserve(points.size());
  for (const Point* p : points) out.push_back(p->message);
  return out;
}

size_t TraceHistory::kept_of(const std::string& series) const {
  const auto it = series_.find(series);
  return it == series_.end() ? 0 : it->second.points.size();
}

}  // namespace magic
