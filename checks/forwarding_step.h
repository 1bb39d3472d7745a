// A StepFunction that forwards every method to the step it wraps: the base of the planted step
// bugs (planted_pipeline.h) and of the watches that record what REPLAY consumes (replay_start.h),
// each overriding the one method its bug or record lives in.
#pragma once

#include "lib/step/step_function.h"

namespace magic::checks {

class ForwardingStep : public StepFunction {
 public:
  explicit ForwardingStep(const StepFunction& inner) : inner_(inner) {}
  int64_t num_steps() const override { return inner_.num_steps(); }
  StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const override {
    return inner_.step(s, t, w, traced);
  }
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override {
    return inner_.assemble_weight_gradient(local);
  }
  TensorTree gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const override {
    return inner_.gradient(state, t, w, create_graph);
  }
  double cotangent_scale() const override { return inner_.cotangent_scale(); }
  bool runs_collectives() const override { return inner_.runs_collectives(); }
  TraceLayout trace_layout() const override { return inner_.trace_layout(); }
  TrainState restore(const TrainState& saved, int64_t step) const override { return inner_.restore(saved, step); }
  TrainState replay_start(const TrainState& state, const TensorTree& query_gradient) const override {
    return inner_.replay_start(state, query_gradient);
  }

 private:
  const StepFunction& inner_;
};

}  // namespace magic::checks
