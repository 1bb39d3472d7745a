// Training state s_t = (θ_t, o_t, p_t): parameters, optimizer state (moments and the int64
// update count), persistent workload state. Every floating entry is a differentiable leaf of
// REPLAY; cotangents are TrainStates holding only floating entries.
#pragma once

#include <string>
#include <vector>

#include "lib/core/tensor_tree.h"

namespace magic {

struct TrainState {
  TensorTree params;
  TensorTree opt;
  TensorTree persistent;
};

// Floating entries in a fixed order: params, then optimizer state, then persistent state.
std::vector<at::Tensor> floating_leaves(const TrainState& state);
TrainState detach_state(const TrainState& state);
// Detached copy whose floating entries are fresh leaves requiring grad.
TrainState leaf_state(const TrainState& state);
// Zeros for each floating entry (the cotangent structure of `state`).
TrainState zero_cotangent(const TrainState& state);
int64_t state_bytes(const TrainState& state);
// The same values with every entry a view of one buffer, where all entries share a dtype and a
// device (otherwise `state` itself): a state held long, many at once, is then one allocation.
TrainState packed(const TrainState& state);

// One tree with "params.", "opt.", "persistent." prefixes, and back.
TensorTree flatten_state(const TrainState& state);
TrainState unflatten_state(const TensorTree& tree);

}  // namespace magic
