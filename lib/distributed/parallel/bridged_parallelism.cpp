#include "lib/distributed/parallel/bridged_parallelism.h"

#include "lib/model/patch_encoder.h"

namespace magic::dist {
namespace {

TensorTree part(const TensorTree& tree, bool encoder) {
  return tree.filter([&](const std::string& name, const at::Tensor&) { return is_encoder_parameter(name) == encoder; });
}

// `a` and `b`'s entries in the order of `like`'s names.
TensorTree in_order_of(const TensorTree& like, const TensorTree& a, const TensorTree& b) {
  TensorTree out;
  for (const auto& e : like) out.insert(e.name, a.contains(e.name) ? a.at(e.name) : b.at(e.name));
  return out;
}

}  // namespace

BridgedParallelism::BridgedParallelism(std::shared_ptr<const Parallelism> encoder,
                                       std::shared_ptr<const Parallelism> lm)
    : encoder_(std::move(encoder)), lm_(std::move(lm)) {}

TensorTree BridgedParallelism::each_side(
    const TensorTree& tree, const std::function<TensorTree(const Parallelism&, const TensorTree&)>& f) const {
  return in_order_of(tree, f(*encoder_, part(tree, true)), f(*lm_, part(tree, false)));
}

TensorTree BridgedParallelism::shard(const TensorTree& full) const {
  return each_side(full, [](const Parallelism& p, const TensorTree& t) { return p.shard(t); });
}

TensorTree BridgedParallelism::unshard(const TensorTree& local) const {
  return each_side(local, [](const Parallelism& p, const TensorTree& t) { return p.unshard(t); });
}

TensorTree BridgedParallelism::enter(const TensorTree& params) const {
  return each_side(params, [](const Parallelism& p, const TensorTree& t) { return p.enter(t); });
}

at::Tensor BridgedParallelism::global_squares(const TensorTree& grads) const {
  // Each side's squares keep their derivative on this rank; each side's apply_clip sums c's over
  // its own groups, so c's derivative is the same total on every rank.
  return encoder_->global_squares(part(grads, true)) + lm_->global_squares(part(grads, false));
}

TensorTree BridgedParallelism::apply_clip(const TensorTree& grads, const at::Tensor& coefficient) const {
  return each_side(grads, [&](const Parallelism& p, const TensorTree& t) { return p.apply_clip(t, coefficient); });
}

TensorTree BridgedParallelism::reduce_gradient(const TensorTree& grads) const {
  return each_side(grads, [](const Parallelism& p, const TensorTree& t) { return p.reduce_gradient(t); });
}

TensorTree BridgedParallelism::apply_convention(const TensorTree& grads) const {
  return each_side(grads, [](const Parallelism& p, const TensorTree& t) { return p.apply_convention(t); });
}

TensorTree BridgedParallelism::optimizer_input(const TensorTree& clipped) const {
  return each_side(clipped, [](const Parallelism& p, const TensorTree& t) { return p.optimizer_input(t); });
}

TraceLayout BridgedParallelism::trace_layout() const {
  TraceLayout out = lm_->trace_layout();
  const TraceLayout encoder = encoder_->trace_layout();
  out.grids["encoder"] = {encoder.mesh, encoder.coords, kEncoderPrefix, encoder.parameters, encoder.parameters_by_name};
  return out;
}

ReductionGroupSums BridgedParallelism::sum_over_reduction_groups(const TensorTree& local) const {
  ReductionGroupSums encoder = encoder_->sum_over_reduction_groups(part(local, true));
  const ReductionGroupSums lm = lm_->sum_over_reduction_groups(part(local, false));
  encoder.whole = in_order_of(local, encoder.whole, lm.whole);
  encoder.ranks.insert(lm.ranks.begin(), lm.ranks.end());
  return encoder;
}

}  // namespace magic::dist
