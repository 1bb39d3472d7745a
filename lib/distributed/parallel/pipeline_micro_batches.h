// A step's or a query's micro-batches over pipeline stages (docs/design.md, "Pipeline stages"):
// the Parallelism::micro_batch_gradients of a mesh with pp > 1. The stored parameters enter once
// (θ_e = enter(θ): the gathers and the tied embedding's copy, in the reduce dtype); the stage runs
// its chunks of every micro-batch in its schedule (pipeline_stage_runner.h) on θ_e cast to the
// compute dtype and differentiates to θ_e; the micro-batches' gradients are summed in micro-batch
// order (in the master dtype, or by ordered_gradient_sum.h when the sum will be differentiated
// again); and one VJP through enter brings the sum back to θ:
//   g_θ = (∂θ_e/∂θ)ᵀ Σ_m ∂(S·L_m)/∂θ_e
// so every reduction in enter()'s backward (a tied embedding's sum over the embedding group, then
// the data-parallel sum or reduce-scatter) runs once per step, after the last micro-batch, on
// every stage at the same point of its program.
#pragma once

#include <vector>

#include "lib/distributed/parallel/pipeline_stage_runner.h"
#include "lib/model/pipeline_stage.h"
#include "lib/step/micro_batch_pass.h"

namespace magic::dist {

// `run`: the stage's pipeline (its micro_batches come from the pass; a pass of fewer micro-batches
// than 1F1B needs, a query's one, runs GPipe); `chunks`: the stage's, in virtual-stage order.
MicroBatchGradients pipeline_micro_batch_gradients(PipelineStageRun run, const std::vector<PipelineStage>& chunks,
                                                   const TensorTree& params, const MicroBatchPass& pass,
                                                   bool create_graph);

// The micro-batches' losses, forward only, as values: on the stage of the last chunk; empty elsewhere.
std::vector<at::Tensor> pipeline_micro_batch_losses(PipelineStageRun run, const std::vector<PipelineStage>& chunks,
                                                    const TensorTree& params, const MicroBatchPass& pass);

}  // namespace magic::dist
