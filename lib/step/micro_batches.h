// Gradient accumulation (docs/magic-check.md, "Micro-batches"): a step's rows on this rank as M
// micro-batches, each its own forward and backward, their gradients summed in the master dtype
// (MixedPrecision::accumulate) before the optimizer sees them. Every micro-batch's `mean` loss is
// divided by the valid labels of the whole global batch (every micro-batch, every rank), so the
// micro-batches' losses add up to the full batch's for any split:
//   L = Σ_m L_m,   L_m = Σ_{i ∈ m} w_i ℓ_i / N,   N = the valid labels of the global batch.
// A class, not free functions, so magic-check can plant a normalization bug as a variant of it
// (checks/planted_micro_batches.cpp) in the pipeline the user runs.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/step/parallelism.h"

namespace magic {

class MicroBatches {
 public:
  explicit MicroBatches(int64_t count = 1);
  virtual ~MicroBatches() = default;

  int64_t count() const { return count_; }
  // `rows` (this rank's rows of a step, in order) as count() contiguous parts whose sizes differ
  // by at most one, the larger first: 7 rows in 3 -> 3, 2, 2. InputError when count() > 1 and
  // there are fewer rows than micro-batches (the tools refuse such a batch before any rank starts).
  std::vector<std::vector<int64_t>> split(const std::vector<int64_t>& rows) const;
  // The `mean` denominator of each micro-batch's loss, given this rank's valid labels in each:
  // the global batch's count, from one Parallelism::mean_denominator call (every rank calls it
  // once per evaluation, so its collective lines up), the same for every micro-batch.
  virtual std::vector<double> denominators(const Parallelism& parallelism,
                                           const std::vector<double>& local_labels) const;

 private:
  int64_t count_;
};

}  // namespace magic
