// Σ_m g_m of per-micro-batch gradients whose own derivative (an HVP, REPLAY's VJP of a step) is
// taken micro-batch by micro-batch, in micro-batch order: the sum's backward runs one nested
// autograd pass per g_m. A pipeline needs both halves of that: each pass then sends one message a
// direction over each stage boundary (the portals' matching rule), and every schedule accumulates
// in the same order, so GPipe and 1F1B give the same bits at second order too. Differentiating a
// plain sum instead visits the micro-batches in the order their graphs were built.
#pragma once

#include <vector>

#include "lib/core/tensor_tree.h"

namespace magic::dist {

// `parts`: trees of one structure (each micro-batch's gradient, built with create_graph);
// `inputs`: every tensor their graphs are to be differentiated to (the parameters, the data
// weights). The result is Σ_m parts[m], entry by entry in m order, differentiable to `inputs` only.
TensorTree ordered_gradient_sum(const std::vector<TensorTree>& parts, const std::vector<at::Tensor>& inputs);

}  // namespace magic::dist
