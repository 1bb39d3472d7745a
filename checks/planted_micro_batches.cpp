#include "checks/planted_micro_batches.h"

#include <algorithm>

namespace magic::checks {
namespace {

constexpr const char* kMicroBatchNormalization = "micro-batch-normalization";

// Each micro-batch's loss a mean over its own valid labels (over the ranks, as the correct
// normalizer is), the M means then averaged: L = (1/M) Σ_m L_m / N_m. Exact only where every
// micro-batch holds N/M of the global batch's labels.
class NormalizedPerMicroBatch : public MicroBatches {
 public:
  using MicroBatches::MicroBatches;
  std::vector<double> denominators(const Parallelism& parallelism,
                                   const std::vector<double>& local_labels) const override {
    std::vector<double> out;
    // A micro-batch with no valid labels on any rank is a mean of nothing, taken as 0 (its sum is 0).
    for (double labels : local_labels) {
      out.push_back(static_cast<double>(count()) * std::max(parallelism.mean_denominator(labels), 1.0));
    }
    return out;
  }
};

}  // namespace

bool is_micro_batch_mutation(const std::string& mutation) {
  return mutation == kMicroBatchNormalization;
}

std::shared_ptr<const MicroBatches> planted_micro_batches(const std::string& mutation, int64_t count) {
  if (mutation == kMicroBatchNormalization) return std::make_shared<NormalizedPerMicroBatch>(count);
  return std::make_shared<MicroBatches>(count);
}

}  // namespace magic::checks
