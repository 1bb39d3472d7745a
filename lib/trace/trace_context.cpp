#include "lib/trace/trace_context.h"

#include "lib/trace/trace_sink.h"

namespace magic {
namespace {

thread_local TraceContext current;

}  // namespace

const TraceContext& trace_context() {
  return current;
}

ScopedTraceContext::ScopedTraceContext(TraceContext context) : previous_(std::move(current)) {
  current = std::move(context);
}

ScopedTraceContext::~ScopedTraceContext() {
  current = std::move(previous_);
}

void trace_activation(const at::Tensor& value, const std::string& name, const std::string& kind,
                      const std::string& layer) {
  if (!tracing() || !current.active) return;
  trace_point(value, [&] {
    return TraceRecord{name, kind, "forward", current.order, current.step, layer, current.activation_placements};
  });
}

void trace_attention(const at::Tensor& probabilities, const std::string& layer) {
  if (!tracing() || !current.active) return;
  trace_point(probabilities, [&] {
    return TraceRecord{layer + ".attn", "attention", "forward", current.order, current.step, layer, {}};
  });
}

}  // namespace magic
