#include "lib/trace/trace_sink.h"

#include <algorithm>

namespace magic {

namespace trace_detail {
std::atomic<TraceSink*> active_sink{nullptr};
}  // namespace trace_detail

void write_tree(TraceSink& sink, const TensorTree& tree, const TraceRecord& like, const std::string& suffix) {
  std::vector<std::string> names = tree.names();
  if (like.kind == "gradient" || like.kind == "reduced_gradient") std::reverse(names.begin(), names.end());
  TraceRecord record = like;
  for (const auto& name : names) {
    record.name = name + suffix;
    sink.write(record, tree.at(name));
  }
}

void trace_tree(const TensorTree& tree, const TraceRecord& like, const std::string& suffix) {
  if (TraceSink* sink = trace_detail::active_sink.load(std::memory_order_acquire))
    write_tree(*sink, tree, like, suffix);
}

ScopedTraceSink::ScopedTraceSink(TraceSink* sink)
    : previous_(trace_detail::active_sink.exchange(sink, std::memory_order_acq_rel)) {}

ScopedTraceSink::~ScopedTraceSink() {
  trace_detail::active_sink.store(previous_, std::memory_order_release);
}

namespace {

std::vector<TraceSink*> listening_and(TraceSink* sink) {
  std::vector<TraceSink*> sinks;
  if (TraceSink* before = trace_detail::active_sink.load(std::memory_order_acquire)) sinks.push_back(before);
  sinks.push_back(sink);
  return sinks;
}

}  // namespace

ScopedAddedTraceSink::ScopedAddedTraceSink(TraceSink* sink) : tee_(listening_and(sink)), listening_(&tee_) {}

}  // namespace magic
