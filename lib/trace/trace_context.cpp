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
  trace_activation(value, name, kind, layer, current.activation_placements);
}

void trace_activation(const at::Tensor& value, const std::string& name, const std::string& kind,
                      const std::string& layer, const std::vector<Placement>& placements) {
  if (!tracing() || !current.active) return;
  auto record = [&](int64_t micro_batch) {
    return TraceRecord{name, kind, "forward", current.order, current.step, layer, placements, micro_batch};
  };
  if (current.micro_batch_rows.empty()) {
    trace_point(value, [&] { return record(current.micro_batch); });
    return;
  }
  for (size_t k = 0; k < current.micro_batch_rows.size(); ++k) {
    trace_point(value.index_select(0, current.micro_batch_rows[k]), [&] { return record(static_cast<int64_t>(k)); });
  }
}

void trace_attention(const at::Tensor& probabilities, const std::string& layer) {
  if (!tracing() || !current.active) return;
  trace_point(probabilities, [&] {
    return TraceRecord{layer + ".attn", "attention", "forward", current.order,
                       current.step,    layer,       {},        current.micro_batch};
  });
}

}  // namespace magic
