#include "lib/step/train_state.h"

namespace magic {

std::vector<at::Tensor> floating_leaves(const TrainState& s) {
  std::vector<at::Tensor> leaves;
  for (const TensorTree* tree : {&s.params, &s.opt, &s.persistent}) {
    for (const auto& e : *tree) {
      if (e.tensor.is_floating_point()) leaves.push_back(e.tensor);
    }
  }
  return leaves;
}

TrainState detach_state(const TrainState& s) {
  return {s.params.detach(), s.opt.detach(), s.persistent.detach()};
}

TrainState leaf_state(const TrainState& s) {
  return {s.params.requires_grad(), s.opt.requires_grad(), s.persistent.requires_grad()};
}

TrainState zero_cotangent(const TrainState& s) {
  auto zeros = [](const TensorTree& t) { return t.floating().zeros_like(); };
  return {zeros(s.params), zeros(s.opt), zeros(s.persistent)};
}

int64_t state_bytes(const TrainState& s) {
  int64_t bytes = 0;
  for (const auto& t : {&s.params, &s.opt, &s.persistent}) {
    for (const auto& e : *t) bytes += e.tensor.numel() * static_cast<int64_t>(e.tensor.element_size());
  }
  return bytes;
}

TrainState packed(const TrainState& s) {
  const TensorTree all = flatten_state(s);
  if (all.empty()) return s;
  const at::Tensor& first = all.begin()->tensor;
  for (const auto& e : all) {
    if (e.tensor.scalar_type() != first.scalar_type() || e.tensor.device() != first.device()) return s;
  }
  return unflatten_state(all.unflatten(all.flatten()));
}

TensorTree flatten_state(const TrainState& s) {
  return merge(merge(s.params.with_prefix("params."), s.opt.with_prefix("opt.")),
               s.persistent.with_prefix("persistent."));
}

TrainState unflatten_state(const TensorTree& tree) {
  return {tree.strip_prefix("params."), tree.strip_prefix("opt."), tree.strip_prefix("persistent.")};
}

}  // namespace magic
