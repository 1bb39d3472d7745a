// replay/<param>[start]: λ_N = ∂Q/∂θ_N, the cotangent REPLAY starts from, as REPLAY consumes it
// (StepFunction::replay_start: unscaled, in the master dtype). The query_grad rows see the query
// gradient the run reports; these see what REPLAY was handed, where a loss scale left on it or a
// rank's copy that differs would scale every score while every other row passes.
#pragma once

#include "checks/forwarding_step.h"
#include "checks/pipeline_outputs.h"
#include "lib/distributed/runtime/group.h"

namespace magic::checks {

// Records the λ_N's parameters of the step it wraps, as REPLAY starts from them on this rank.
class ReplayStartWatch : public ForwardingStep {
 public:
  using ForwardingStep::ForwardingStep;
  TrainState replay_start(const TrainState& state, const TensorTree& query_gradient) const override;
  // This rank's λ_N parameters (its shards where parameters are sharded); empty before REPLAY.
  const TensorTree& recorded() const { return start_; }

 private:
  mutable TensorTree start_;
};

// Mesh layouts: one row per parameter holding every rank's full λ_N ([world·n], rank by rank),
// gathered over `world` (every rank calls it), so that one rank's copy cannot hide behind rank 0's.
// `full_start` is this rank's λ_N at full shape; n of each entry's sum: the queries' labels.
PipelineOutputs replay_start_outputs(const dist::Group& world, const TensorTree& full_start, int64_t sum_length);
// The reference's partner: its λ_N once per rank.
PipelineOutputs replay_start_reference(const TensorTree& start, int64_t world_size, int64_t sum_length);

// The row name of parameter (or parameter group) `name`: "tok_emb[start]".
std::string replay_start_row_name(const std::string& name);

}  // namespace magic::checks
