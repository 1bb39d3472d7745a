#include "lib/model/tensor_parallel.h"

#include <algorithm>

#include "lib/model/kernel_fallback.h"

namespace magic {

at::Tensor TensorParallel::column_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const {
  return kernels::linear(enter_column(x, 1), weight, bias);
}

at::Tensor TensorParallel::row_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const {
  if (size() == 1) return kernels::linear(x, weight, bias);
  return leave_row(kernels::linear(x, weight), 1) + bias;
}

VocabShard vocab_shard(int64_t vocabulary, int64_t tp, int64_t index) {
  VocabShard s;
  s.vocabulary = vocabulary;
  s.local = (vocabulary + tp - 1) / tp;
  s.begin = index * s.local;
  s.real = std::clamp<int64_t>(vocabulary - s.begin, 0, s.local);
  return s;
}

}  // namespace magic
