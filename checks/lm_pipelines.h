// The causal-LM workload of magic-check, run twice on the same data, init and order: the
// distributed MAGIC pipeline (lib/dist data parallelism, REPLAY) on every rank, and the
// single-process full-batch reference (reference/, unrolled) on one. Both produce the tensors
// DESIGN.md section 5 compares.
#pragma once

#include <vector>

#include "checks/check_settings.h"
#include "lib/core/tensor_tree.h"
#include "lib/dist/planted_bug.h"
#include "lib/dist/runtime.h"
#include "lib/train/run_config.h"

namespace magic::checks {

struct PipelineOutputs {
  std::vector<TensorTree> step_grads;  // the gradient each step's optimizer consumed
  TensorTree query_grad;               // ∂Q/∂θ_N
  TensorTree hvp_initial, hvp_final;   // ∇²L v at θ_0 (batch 0) and θ_N (batch N-1)
  TensorTree final_params;
  at::Tensor scores;                   // dQ/dw per token [N, T]; per document = sum over T
};

// The run configuration of the check workload: a small GPT on the KJV fixture, per-token weights.
RunConfig lm_check_config(const CheckSettings& settings);

// The random direction of the HVP checks, the same on every rank.
TensorTree hvp_direction(const TensorTree& params, uint64_t seed);

// Every rank calls it; the outputs are replicated (identical on every rank).
PipelineOutputs run_distributed_lm(const CheckSettings& settings, const dist::Runtime& runtime,
                                   dist::PlantedBug bug);

PipelineOutputs run_reference_lm(const CheckSettings& settings);

// Valid labels in each data-parallel shard of step t's global batch.
std::vector<int64_t> shard_label_counts(const CheckSettings& settings, int64_t step);

}  // namespace magic::checks
