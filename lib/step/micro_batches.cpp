#include "lib/step/micro_batches.h"

#include <numeric>
#include <stdexcept>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

MicroBatches::MicroBatches(int64_t count) : count_(count) {
  if (count < 1) throw std::logic_error(str_cat("MicroBatches: count ", count, " < 1"));
}

std::vector<std::vector<int64_t>> MicroBatches::split(const std::vector<int64_t>& rows) const {
  if (count_ == 1) return {rows};  // a rank beyond the batch's rows holds an empty shard
  const auto total = static_cast<int64_t>(rows.size());
  if (total < count_) {
    throw InputError(str_cat("mb=", count_, ": a rank holds ", total, " rows of a step, fewer than its ", count_,
                             " micro-batches (every rank needs at least mb rows)"));
  }
  std::vector<std::vector<int64_t>> parts;
  const int64_t base = total / count_, extra = total % count_;
  auto begin = rows.begin();
  for (int64_t m = 0; m < count_; ++m) {
    const int64_t size = base + (m < extra ? 1 : 0);
    parts.emplace_back(begin, begin + size);
    begin += size;
  }
  return parts;
}

std::vector<double> MicroBatches::denominators(const Parallelism& parallelism,
                                               const std::vector<double>& local_labels) const {
  const double global = parallelism.mean_denominator(std::accumulate(local_labels.begin(), local_labels.end(), 0.0));
  return std::vector<double>(local_labels.size(), global);
}

}  // namespace magic
