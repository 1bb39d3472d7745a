#include "lib/step/parallelism.h"

#include <c10/util/Type.h>

#include <stdexcept>

#include "lib/core/strings.h"

namespace magic {

void Parallelism::unimplemented(const char* method) const {
  throw std::logic_error(str_cat(c10::demangle(typeid(*this).name()), " does not implement Parallelism::", method));
}

TensorTree scale_by(const TensorTree& grads, const at::Tensor& coefficient) {
  return grads.map([&](const at::Tensor& g) { return g * coefficient; });
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
