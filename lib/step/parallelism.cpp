#include "lib/step/parallelism.h"

#include <c10/util/Type.h>
#include <torch/csrc/autograd/autograd.h>

#include <stdexcept>

#include "lib/core/strings.h"

namespace magic {

void Parallelism::unimplemented(const char* method) const {
  throw std::logic_error(str_cat(c10::demangle(typeid(*this).name()), " does not implement Parallelism::", method));
}

TensorTree scale_by(const TensorTree& grads, const at::Tensor& coefficient) {
  return grads.map([&](const at::Tensor& g) { return g * coefficient; });
}

MicroBatchGradients Parallelism::micro_batch_gradients(const TensorTree& params, const MicroBatchPass& pass,
                                                       bool create_graph) const {
  // Each micro-batch's forward and backward in turn, its graph freed unless the gradient will be
  // differentiated again.
  MicroBatchGradients out;
  for (int64_t m = 0; m < pass.count; ++m) {
    const at::Tensor loss = pass.forward(m, PipelineStage{}, pass.to_compute(pass.enter(params)), at::Tensor());
    auto grads = torch::autograd::grad({pass.scale_loss(loss)}, params.tensors(), {}, /*retain_graph=*/create_graph,
                                       /*create_graph=*/create_graph, /*allow_unused=*/true);
    const TensorTree micro = with_values(params, grads);
    out.gradient = m == 0 ? micro : pass.accumulate(out.gradient, micro);
    out.loss = m == 0 ? loss.detach() : out.loss + loss.detach();
  }
  return out;
}

std::vector<at::Tensor> Parallelism::micro_batch_losses(const TensorTree& params, const MicroBatchPass& pass) const {
  std::vector<at::Tensor> losses;
  for (int64_t m = 0; m < pass.count; ++m) {
    losses.push_back(pass.forward(m, PipelineStage{}, pass.to_compute(pass.enter(params)), {}));
  }
  return losses;
}

ReductionGroupSums SingleProcess::sum_over_reduction_groups(const TensorTree& local) const {
  ReductionGroupSums out{local.detach().clone(), {}};
  for (const auto& p : local) out.ranks[p.name] = 1;
  return out;
}

at::Tensor with_global_value(const Parallelism& parallelism, const at::Tensor& local) {
  const at::Tensor detached = local.detach();
  return local + (parallelism.sum_across_ranks(detached) - detached);
}

}  // namespace magic
