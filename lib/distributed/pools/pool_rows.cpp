#include "lib/distributed/pools/pool_rows.h"

#include <algorithm>

namespace magic::dist {

RowRange rows_of(const ThreePoolLayout& layout, int rank, int64_t batch) {
  int64_t pool = 1;
  switch (layout.role(rank)) {
    case PoolRole::kCi:
      pool = layout.n_ci();
      break;
    case PoolRole::kBlock:
      pool = layout.n_per_block();
      break;
    case PoolRole::kPpgd:
      pool = layout.n_ppgd();
      break;
  }
  const int64_t n = batch / pool, i = layout.index_in_pool(rank);
  return {i * n, (i + 1) * n};
}

RowRange overlap(RowRange a, RowRange b) {
  return {std::max(a.begin, b.begin), std::min(a.end, b.end)};
}

std::vector<int64_t> rows_in(const std::vector<int64_t>& v, RowRange range) {
  return std::vector<int64_t>(v.begin() + range.begin, v.begin() + range.end);
}

at::Tensor inputs_of(const at::Tensor& inputs, const std::vector<int64_t>& rows) {
  return at::cat({inputs, at::zeros({1, inputs.size(1)}, inputs.options())})
      .index_select(0, at::tensor(rows, at::kLong));
}

at::Tensor weights_of(const at::Tensor& w, const std::vector<int64_t>& rows) {
  return at::cat({w, at::zeros({1}, w.options())}).index_select(0, at::tensor(rows, at::kLong));
}

double real_rows(const std::vector<int64_t>& rows, int64_t examples) {
  double n = 0;
  for (int64_t r : rows) n += r < examples;
  return n;
}

}  // namespace magic::dist
