// One pipeline stage's forward and backward passes over a step's micro-batches, in its schedule's
// order (pipeline_schedule.h). Each chunk after the pipeline's first receives its input from the
// stage before it, and each chunk before the last sends its output on, through portals
// (lib/distributed/pools/portal.h): the cotangents cross back in the backward, and a gradient
// taken with create_graph can be differentiated again across the stages (an HVP, REPLAY).
// Per micro-batch gradients are kept apart and summed by the caller in micro-batch order, so that
// every schedule gives the same bits.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "lib/core/tensor_tree.h"
#include "lib/distributed/parallel/pipeline_schedule.h"
#include "lib/distributed/runtime/group.h"

namespace magic::dist {

struct PipelineStageRun {
  const Group* group = nullptr;  // the pipeline group: its rank s is stage s (nullptr: pp = 1)
  int64_t pp = 1, vpp = 1, stage = 0;
  PipelineSchedule schedule = PipelineSchedule::kOneForwardOneBackward;
  int64_t micro_batches = 1;
  std::string name = "activations";  // the portals' name in errors
  int64_t base_tag = 0;              // a multiple of 8; each (micro-batch, boundary) takes the next
  bool forward_only = false;         // the forward passes alone (a loss's value): no gradients
};

// chunk_forward(m, v, input): the stage's chunk v on micro-batch m. `input` is undefined for the
// pipeline's first chunk (it reads its micro-batch itself) and the previous chunk's output
// otherwise; the pipeline's last chunk returns micro-batch m's loss (0-dim), the others their
// hidden states, shaped hidden_shape(m).
using ChunkForward = std::function<at::Tensor(int64_t m, int64_t v, const at::Tensor& input)>;

struct PipelineStageResult {
  // Per micro-batch: d loss_m / d params over this stage's chunks (zeros for a parameter m does
  // not reach). With create_graph, differentiable again: each holds the zero tokens of its sends.
  std::vector<TensorTree> gradients;
  std::vector<at::Tensor> losses;  // each micro-batch's loss on the stage of the last chunk; else empty
};

// `params`: this stage's parameters, leaves that require grad; the first is the anchor of its
// receives. Waits for its own sends before it returns.
PipelineStageResult run_pipeline_stage(const PipelineStageRun& run, const TensorTree& params,
                                       const ChunkForward& chunk_forward,
                                       const std::function<std::vector<int64_t>(int64_t m)>& hidden_shape,
                                       bool create_graph);

}  // namespace magic::dist
