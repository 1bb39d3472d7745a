// grad/shard_weights: the weight each rank's tokens get in a step's gradient, in units of the
// single process's (1 everywhere in a correct run), from integer label counts in fp64:
//   weight_r = N · m_r / d_r      N the step's valid labels over every rank, d_r the `mean`
//                                 denominator rank r's loss was divided by (Parallelism::
//                                 mean_denominator), m_r its convention's factor (apply_convention:
//                                 1 for SUM, 1/R for AVG); without a `mean` reduction, m_r; 1 on
//                                 a rank with no valid labels (it weighs no token)
// A local mean averaged over unequal shards (the AVG convention's known error) weighs rank r's
// tokens N/(R·n_r); a normalizer over too few ranks, N/n_r. These are known before any gradient
// is computed, so the row is judged exactly in every precision: bf16's noise in the gradient rows
// cannot hide a 0.8% error it makes certain.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "checks/pipeline_outputs.h"
#include "lib/distributed/runtime/group.h"
#include "lib/step/parallelism.h"

namespace magic::checks {

// The normalizer of the one loss evaluated while armed: the rank's valid labels and the
// denominator it was divided by.
class NormalizerTap {
 public:
  struct Call {
    double local_labels = 0.0, denominator = 0.0;
  };
  void arm();
  void record(double local_labels, double denominator);
  // The call of the armed evaluation (none: no `mean` reduction; the last where a planted bug
  // normalizes each micro-batch on its own: each of its calls weighs the ranks alike); disarms.
  std::optional<Call> take();

 private:
  mutable std::mutex mutex_;
  bool armed_ = false;
  std::optional<Call> call_;
};

// `inner` with its mean_denominator() recorded into `tap` while armed.
std::shared_ptr<const Parallelism> normalizer_tapped(std::shared_ptr<const Parallelism> inner,
                                                     std::shared_ptr<NormalizerTap> tap);

// m_r: the factor `parallel`'s convention applies to a gradient (that of its first parameter,
// measured on a tree of ones shaped like `params`).
double convention_factor(const Parallelism& parallel, const TensorTree& params);

// The grad-level output: [steps·R] weights, step by step, gathered over `world` (every rank calls
// it), with the counts behind them in its detail. `calls[t]` is this rank's normalizer at step t;
// `label_copies` ranks hold each row shard's labels (its tp ranks, on every pipeline stage).
NamedTensor shard_weight_output(const dist::Group& world, const std::vector<std::optional<NormalizerTap::Call>>& calls,
                                double convention, int64_t label_copies);
// The reference's partner: ones.
NamedTensor shard_weight_reference(int64_t steps, int64_t world_size);

// The row: exact (fp64 tolerance) in every precision; a failure names the counts and weights.
CheckRow shard_weight_row(const NamedTensor& distributed, const NamedTensor& reference,
                          const std::vector<NamedFactor>& factors);

}  // namespace magic::checks
