#include "lib/live/tracer_sink.h"

#include "lib/core/dtype.h"

namespace magic {
namespace {

using nlohmann::json;

std::string tensor_dtype(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) ? dtype_name(t.scalar_type())
                                             : std::string(c10::toString(t.scalar_type()));
}

// REPLAY's per-step contribution to the scores (replay_backward.cpp's trace point).
bool is_step_contribution(const TraceRecord& r) {
  return r.kind == "score" && r.phase == "replay" && r.step >= 0 && r.name == "scores";
}

// The example id of each entry `top` listed of a score tensor whose first dimension is the
// examples (a per-token row's entries are its example's).
void add_example_ids(json& data, const at::Tensor& scores, const std::vector<std::string>& ids) {
  if (ids.empty() || scores.dim() < 1 || scores.size(0) != static_cast<int64_t>(ids.size())) return;
  const int64_t per_example = std::max<int64_t>(scores.numel() / scores.size(0), 1);
  for (const char* part : {"largest", "smallest"}) {
    json& p = data[part];
    json names = json::array();
    for (const json& index : p.at("index"))
      names.push_back(ids.at(static_cast<size_t>(index.get<int64_t>() / per_example)));
    p["id"] = std::move(names);
  }
}

}  // namespace

nlohmann::json record_message(const TraceOrigin& origin, const TraceRecord& record, const at::Tensor& tensor,
                              const TraceRule& rule, nlohmann::json data) {
  json m = {{"type", "record"},
            {"run", origin.run},
            {"rank", origin.rank},
            {"coords", origin.coords},
            {"step", record.step},
            {"phase", record.phase},
            {"order", record.order},
            {"kind", record.kind},
            {"layer", record.layer},
            {"name", record.name},
            {"shape", tensor.sizes().vec()},
            {"dtype", tensor_dtype(tensor)},
            {"compressor", compressor_name(rule.spec.kind)},
            {"data", std::move(data)}};
  if (record.micro_batch >= 0) m["micro_batch"] = record.micro_batch;
  return m;
}

TracerSink::TracerSink(TraceOrigin origin, TraceControl control, std::shared_ptr<const ProjectionVectors> vectors)
    : origin_(std::move(origin)),
      vectors_(std::move(vectors)),
      control_(std::make_shared<const TraceControl>(std::move(control))) {}

void TracerSink::set_control(TraceControl control) {
  std::atomic_store(&control_,
                    std::shared_ptr<const TraceControl>(std::make_shared<const TraceControl>(std::move(control))));
}

TraceControl TracerSink::control() const {
  return *std::atomic_load(&control_);
}

void TracerSink::begin_run(std::string run) {
  std::lock_guard<std::mutex> lock(mutex_);
  origin_.run = std::move(run);
  identities_.clear();
  running_scores_ = at::Tensor();
}

void TracerSink::set_example_ids(std::vector<std::string> ids) {
  std::lock_guard<std::mutex> lock(mutex_);
  example_ids_ = std::move(ids);
}

TraceOrigin TracerSink::origin() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return origin_;
}

nlohmann::json TracerSink::hello() const {
  const TraceOrigin o = origin();
  json mesh = json::array();
  for (const MeshDim& d : o.mesh) mesh.push_back({{"name", d.name}, {"size", d.size}});
  return {{"type", "hello"},  {"version", 1}, {"run", o.run},
          {"ranks", o.ranks}, {"mesh", mesh}, {"control", control_json(control())}};
}

void TracerSink::write(const TraceRecord& record, const at::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || !identities_.insert(record_identity(record)).second) return;
  emit(record, tensor);
  if (!is_step_contribution(record)) return;
  // Σ_{s ≥ t} dQ/dw_s: REPLAY walks the steps backwards.
  at::NoGradGuard no_grad;
  const at::Tensor dw = tensor.detach().to(at::kCPU).to(at::kDouble);
  running_scores_ =
      running_scores_.defined() && running_scores_.sizes() == dw.sizes() ? running_scores_ + dw : dw.clone();
  TraceRecord running = record;
  running.name = "running_scores";
  emit(running, running_scores_);
}

void TracerSink::emit(const TraceRecord& record, const at::Tensor& tensor) {
  const std::shared_ptr<const TraceControl> control = std::atomic_load(&control_);
  if (control->paused) return;
  const TraceRule* rule = matching_rule(*control, record, origin_.run);
  if (rule == nullptr || !due(*rule, record)) return;
  json data = compress(rule->spec, tensor, record.layer, vectors_.get());
  if (rule->spec.kind == Compressor::kTop && record.kind == "score") add_example_ids(data, tensor, example_ids_);
  json message = record_message(origin_, record, tensor, *rule, std::move(data));
  message["seq"] = seq_++;
  at::Tensor whole;
  if (rule->spec.kind == Compressor::kNone) whole = tensor.detach().to(at::kCPU).clone().contiguous();
  publish(TraceEvent::make(std::move(message), std::move(whole)));
}

void TracerSink::publish(const std::shared_ptr<const TraceEvent>& event) {
  for (TraceOutput* out : outputs_) out->publish(event);
}

void TracerSink::announce(nlohmann::json message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!finished_) publish(TraceEvent::make(std::move(message)));
}

void TracerSink::finish(const std::string& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  publish(TraceEvent::make({{"type", "end"}, {"records", seq_.load()}, {"status", status}}));
}

}  // namespace magic
