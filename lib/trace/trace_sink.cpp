#include "lib/trace/trace_sink.h"

#include <algorithm>

namespace magic {

namespace trace_detail {
std::atomic<TraceSink*> active_sink{nullptr};
}  // namespace trace_detail

namespace {

// The entries' names in record order (docs/dump-format.md): a gradient's last entry first.
std::vector<std::string> record_order(const TensorTree& tree, const TraceRecord& like) {
  std::vector<std::string> names = tree.names();
  if (like.kind == "gradient" || like.kind == "reduced_gradient") std::reverse(names.begin(), names.end());
  return names;
}

}  // namespace

void write_tree(TraceSink& sink, const TensorTree& tree, const TraceRecord& like, const std::string& suffix) {
  TraceRecord record = like;
  for (const auto& name : record_order(tree, like)) {
    record.name = name + suffix;
    sink.write(record, tree.at(name));
  }
}

void trace_tree(const TensorTree& tree, const TraceRecord& like, const std::string& suffix) {
  if (TraceSink* sink = trace_detail::active_sink.load(std::memory_order_acquire))
    write_tree(*sink, tree, like, suffix);
}

void trace_parameter_tree(const TensorTree& tree, const TraceRecord& like, const TraceLayout& layout) {
  TraceSink* sink = trace_detail::active_sink.load(std::memory_order_acquire);
  if (sink == nullptr) return;
  TraceRecord record = like;
  for (const auto& name : record_order(tree, like)) {
    record.name = name;
    record.placements = layout.parameter(name);
    record.mesh = layout.parameter_grid(name);
    sink->write(record, tree.at(name));
  }
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

MicroBatchOrder::MicroBatchOrder()
    : next_(trace_detail::active_sink.load(std::memory_order_acquire)), listening_(this) {}

void MicroBatchOrder::write(const TraceRecord& record, const at::Tensor& tensor) {
  const std::lock_guard<std::mutex> lock(mutex_);
  held_.emplace_back(record, tensor.detach().clone());
}

void MicroBatchOrder::flush() {
  std::vector<std::pair<TraceRecord, at::Tensor>> held;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    held.swap(held_);
  }
  std::stable_sort(held.begin(), held.end(),
                   [](const auto& a, const auto& b) { return a.first.micro_batch < b.first.micro_batch; });
  if (next_ == nullptr) return;
  for (const auto& [record, tensor] : held) next_->write(record, tensor);
}

}  // namespace magic
