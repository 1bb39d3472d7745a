// What a forward pass of the model is told about how it is split across ranks: the sequence
// columns it computes (context parallelism: sequence_layout.h), the tensor-parallel operations
// (tensor_parallel.h) and the layers it runs (pipeline parallelism: pipeline_stage.h). A single
// process's layout is the whole sequence and the whole model on one rank.
#pragma once

#include <memory>

#include "lib/model/pipeline_stage.h"
#include "lib/model/sequence_layout.h"
#include "lib/model/tensor_parallel.h"

namespace magic {

struct ModelLayout {
  SequenceLayout sequence;
  std::shared_ptr<const TensorParallel> tensor = std::make_shared<SingleRank>();
  // The positions of the residual stream's columns when they are fewer than the sequence's
  // (sequence parallelism: this tp rank's shard); undefined: sequence.position_ids.
  at::Tensor residual_position_ids;
  PipelineStage stage;

  const at::Tensor& embedded_positions() const {
    return residual_position_ids.defined() ? residual_position_ids : sequence.position_ids;
  }

  // The same layout with its index tensors on `device`.
  ModelLayout to(const at::Device& device) const {
    return {sequence.to(device), tensor,
            residual_position_ids.defined() ? residual_position_ids.to(device) : at::Tensor(), stage};
  }

  static ModelLayout whole(int64_t length) {
    return {SequenceLayout::whole(length), std::make_shared<SingleRank>(), {}, {}};
  }
};

}  // namespace magic
