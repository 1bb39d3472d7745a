// ∇²L_t(θ) v = ∇<∇L_t(θ), v>, through whatever collectives the step's gradient uses: the hvp
// level's product, taken on every rank (a phase of its own, so that a stuck rank names it).
#pragma once

#include "lib/step/step_function.h"

namespace magic {

TensorTree hessian_vector_product(const StepFunction& step, const TrainState& state, int64_t t, const at::Tensor& w,
                                  const TensorTree& direction);

}  // namespace magic
