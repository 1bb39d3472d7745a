// What a training step or a query computes for each of its micro-batches, handed to
// Parallelism::micro_batch_gradients, which decides where and in what order the passes run: one
// after another on every rank, or over pipeline stages in a schedule (docs/design.md, "Pipeline
// stages"). The step keeps the mathematics (the model, the loss, the precision policy); the
// parallelism keeps the order, the transfers and the reductions.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "lib/core/tensor_tree.h"
#include "lib/model/pipeline_stage.h"

namespace magic {

struct MicroBatchPass {
  int64_t count = 1;
  // The stored parameters entered, in the reduce dtype (MixedPrecision::entered_params), and the
  // entered ones as the forward uses them (MixedPrecision::to_compute).
  std::function<TensorTree(const TensorTree& stored)> enter;
  std::function<TensorTree(const TensorTree& entered)> to_compute;
  // Micro-batch m through the part of the model `stage` names, with the computed parameters: from
  // its tokens (stage.embeds) or `input` (the previous chunk's hidden states) to its loss,
  // unscaled (stage.heads) or its hidden states.
  std::function<at::Tensor(int64_t m, const PipelineStage& stage, const TensorTree& computed, const at::Tensor& input)>
      forward;
  // The shape of micro-batch m's hidden states (what crosses a pipeline stage boundary).
  std::function<std::vector<int64_t>(int64_t m)> hidden_shape;
  // S·L: what is differentiated (MixedPrecision::scale_loss).
  std::function<at::Tensor(const at::Tensor& loss)> scale_loss;
  // `sum` plus the next micro-batch's gradient (MixedPrecision::accumulate).
  std::function<TensorTree(const TensorTree& sum, const TensorTree& next)> accumulate;
  // Tensors besides the parameters that a later derivative of the gradient is taken to (the data
  // weights in REPLAY); a pipeline's second-order passes must reach them.
  std::vector<at::Tensor> inputs;
};

struct MicroBatchGradients {
  TensorTree gradient;  // Σ_m ∇(S·L_m) with respect to the stored parameters, as enter()'s backward reduces it
  at::Tensor loss;      // Σ_m L_m, detached: this rank's share (0 on a rank that computes no loss)
};

}  // namespace magic
