// Gradient clipping by global norm, differentiable end to end:
//   g' = g · min(1, max_norm / (||g|| + 1e-6))
// torchopt computes the coefficient under no_grad; we keep its graph so that the metagradient
// is the true derivative of training (finite differences see the norm move).
#pragma once

#include "lib/core/tensor_tree.h"

namespace magic {

// Added to ||g|| in the coefficient's denominator; named so that the exported plan
// (lib/train/plan_export.h) states the value clipping uses.
constexpr double kClipNormEpsilon = 1e-6;

TensorTree clip_by_global_norm(const TensorTree& grads, double max_norm);
// The same with ||g|| given: sharded gradients hold a piece of g, their norm spans every piece.
TensorTree clip_by_global_norm(const TensorTree& grads, double max_norm, const at::Tensor& global_norm);
// c = min(1, max_norm / (||g|| + 1e-6)), differentiable; clipping is g' = c·g.
at::Tensor clip_coefficient(double max_norm, const at::Tensor& global_norm);

}  // namespace magic
