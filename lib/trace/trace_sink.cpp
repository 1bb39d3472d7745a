#include "lib/trace/trace_sink.h"

namespace magic {

namespace trace_detail {
std::atomic<TraceSink*> active_sink{nullptr};
}  // namespace trace_detail

ScopedTraceSink::ScopedTraceSink(TraceSink* sink)
    : previous_(trace_detail::active_sink.exchange(sink, std::memory_order_acq_rel)) {}

ScopedTraceSink::~ScopedTraceSink() { trace_detail::active_sink.store(previous_, std::memory_order_release); }

}  // namespace magic
