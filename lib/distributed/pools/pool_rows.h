// Which rows of a step's global batch each pool rank holds. Every pool splits the batch into
// equal contiguous shards (the layout checks that its pool sizes divide the batch): rank i of a
// pool of n holds rows [i·B/n, (i+1)·B/n). Pools of different sizes hold overlapping ranges;
// the gates portal sends each consumer the overlap (gate_exchange.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "lib/distributed/pools/three_pool_layout.h"

namespace magic::dist {

struct RowRange {
  int64_t begin, end;
  int64_t size() const { return end - begin; }
};

// The rows of a `batch`-row global batch that `rank`'s pool shard holds.
RowRange rows_of(const ThreePoolLayout& layout, int rank, int64_t batch);
RowRange overlap(RowRange a, RowRange b);

// v[range.begin, range.end)
std::vector<int64_t> rows_in(const std::vector<int64_t>& v, RowRange range);
// Inputs / weights of `rows`; the padding row (index = number of examples) is zero, weight 0.
at::Tensor inputs_of(const at::Tensor& inputs, const std::vector<int64_t>& rows);
at::Tensor weights_of(const at::Tensor& w, const std::vector<int64_t>& rows);
// How many of `rows` are real examples (not the padding row).
double real_rows(const std::vector<int64_t>& rows, int64_t examples);

}  // namespace magic::dist
