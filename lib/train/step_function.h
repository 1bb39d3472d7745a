// The two functions a MAGIC pipeline is made of, as interfaces so the single-process engine and
// the distributed one share ForwardTraining and ReplayBackward:
//   StepFunction:  s_{t+1} = step(s_t, batch_t, w)
//   QueryFunction: Q(θ), the query loss at the final parameters
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "lib/train/train_state.h"

namespace magic {

struct StepOutput {
  TrainState next;
  TensorTree grads;  // the (reduced, clipped) gradient the optimizer consumed
  at::Tensor loss;   // the training loss of this step (this rank's part when distributed)
};

class StepFunction {
 public:
  virtual ~StepFunction() = default;
  virtual int64_t num_steps() const = 0;
  // traced = true: the floating leaves of s must require grad; the result keeps the graph to
  // them and to w (create_graph), ready for one vector-Jacobian product. traced = false: a
  // plain training step, result detached.
  virtual StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const = 0;
};

class QueryFunction {
 public:
  virtual ~QueryFunction() = default;
  virtual int64_t num_queries() const = 0;
  // The mean query loss, or query `index`'s loss alone.
  virtual at::Tensor loss(const TensorTree& params, std::optional<int64_t> index = std::nullopt) const = 0;
};

// ∂Q/∂θ at `params` (detached result).
TensorTree query_gradient(const QueryFunction& query, const TensorTree& params,
                          std::optional<int64_t> index = std::nullopt);

}  // namespace magic
