#include "checks/shard_weights.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "checks/forwarding_parallelism.h"
#include "lib/core/strings.h"

namespace magic::checks {
namespace {

constexpr const char* kRowName = "shard_weights";
// At most this many uneven steps are spelled out in a failure; the rest are counted.
constexpr size_t kShownSteps = 2;

class NormalizerTapped : public ForwardingParallelism {
 public:
  NormalizerTapped(std::shared_ptr<const Parallelism> inner, std::shared_ptr<NormalizerTap> tap)
      : ForwardingParallelism(std::move(inner)), tap_(std::move(tap)) {}
  double mean_denominator(double local_valid_labels) const override {
    const double d = ForwardingParallelism::mean_denominator(local_valid_labels);
    tap_->record(local_valid_labels, d);
    return d;
  }

 private:
  std::shared_ptr<NormalizerTap> tap_;
};

std::string numbers(const std::vector<double>& values, int digits) {
  std::vector<std::string> shown;
  for (double v : values) shown.push_back(format_fixed(v, digits));
  return join(shown, ", ");
}

}  // namespace

void NormalizerTap::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = true;
  call_.reset();
}

void NormalizerTap::record(double local_labels, double denominator) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (armed_) call_ = Call{local_labels, denominator};
}

std::optional<NormalizerTap::Call> NormalizerTap::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  return std::exchange(call_, std::nullopt);
}

std::shared_ptr<const Parallelism> normalizer_tapped(std::shared_ptr<const Parallelism> inner,
                                                     std::shared_ptr<NormalizerTap> tap) {
  return std::make_shared<NormalizerTapped>(std::move(inner), std::move(tap));
}

double convention_factor(const Parallelism& parallel, const TensorTree& params) {
  const TensorTree ones = params.map([](const at::Tensor& p) { return at::ones({1}, at::kDouble).expand(p.sizes()); });
  const TensorTree out = parallel.apply_convention(ones);
  return out.begin()->tensor.reshape({-1})[0].item<double>();
}

NamedTensor shard_weight_output(const dist::Group& world, const std::vector<std::optional<NormalizerTap::Call>>& calls,
                                double convention, int64_t label_copies) {
  const int64_t steps = static_cast<int64_t>(calls.size()), ranks = world.size();
  // [3, steps, R]: labels, denominators, whether a `mean` normalizer was called; rank r's column only.
  at::Tensor mine = at::zeros({3, steps, ranks}, at::kDouble);
  for (int64_t t = 0; t < steps; ++t) {
    if (!calls[t]) continue;
    mine[0][t][world.rank()] = calls[t]->local_labels;
    mine[1][t][world.rank()] = calls[t]->denominator;
    mine[2][t][world.rank()] = 1.0;
  }
  at::Tensor conventions = at::zeros({ranks}, at::kDouble);
  conventions[world.rank()] = convention;
  const at::Tensor all = world.sum(at::cat({mine.reshape({-1}), conventions}));
  const at::Tensor counts = all.narrow(0, 0, 3 * steps * ranks).reshape({3, steps, ranks});
  const at::Tensor m = all.narrow(0, 3 * steps * ranks, ranks);
  // N_t = Σ_r n_r: integers, exact in fp64; the tp ranks of a row shard count the same labels.
  const at::Tensor n = counts[0].sum(1, /*keepdim=*/true) / static_cast<double>(label_copies);
  const at::Tensor with_mean = counts[2].gt(0.5);
  // A rank with no valid labels weighs no token: 1, whatever its denominator.
  const at::Tensor weights =
      at::where(counts[0].eq(0.0) & with_mean, at::ones_like(counts[0]),
                at::where(with_mean, n * m / counts[1].clamp_min(1e-300), m.expand({steps, ranks})));
  NamedTensor out{"grad", kRowName, weights.reshape({-1})};
  out.from_counts = true;
  // AVG's own signature: every rank divides by its own count, then the reduction by R.
  const bool avg = (counts[1] - counts[0].clamp_min(1.0)).abs().max().item<double>() == 0.0 &&
                   (m - 1.0 / static_cast<double>(ranks)).abs().max().item<double>() <= 1e-15;
  const auto as_vector = [](const at::Tensor& x) {
    const at::Tensor c = x.contiguous();
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  };
  // The detail: the first steps whose weights are not all 1, with their counts.
  std::vector<std::string> uneven;
  size_t more = 0;
  for (int64_t t = 0; t < steps; ++t) {
    if ((weights[t] - 1.0).abs().max().item<double>() <= 1e-12) continue;
    if (uneven.size() == kShownSteps) {
      ++more;
      continue;
    }
    std::string step = str_cat("step ", t, ": valid labels by rank ", numbers(as_vector(counts[0][t]), 0),
                               " (N = ", format_fixed(n[t][0].item<double>(), 0), ")");
    if (!avg) {
      step += str_cat(", divided by ", numbers(as_vector(counts[1][t]), 0), ", times ", numbers(as_vector(m), 4));
    }
    uneven.push_back(str_cat(step, ": weights ", numbers(as_vector(weights[t]), 4)));
  }
  if (!uneven.empty()) {
    out.detail = str_cat(avg ? str_cat("AVG meets unequal shards (each rank's mean averaged over ", ranks,
                                       " ranks weighs its tokens N/(R*n_r))")
                             : std::string("each rank's tokens weigh other than the single process's"),
                         "; ", join(uneven, "; "), more > 0 ? str_cat("; ", more, " more steps") : "");
  }
  return out;
}

NamedTensor shard_weight_reference(int64_t steps, int64_t world_size) {
  NamedTensor out{"grad", kRowName, at::ones({steps * world_size}, at::kDouble)};
  out.from_counts = true;
  return out;
}

CheckRow shard_weight_row(const NamedTensor& distributed, const NamedTensor& reference,
                          const std::vector<NamedFactor>& factors) {
  CheckRow row = make_check_row(distributed.level, distributed.name, distributed.value, reference.value,
                                default_tolerance(at::kDouble), factors);
  // The counts say why; a factor the weights share (≈ x dp: a normalizer over too few ranks) first.
  if (!row.passed && !distributed.detail.empty()) {
    row.diagnosis.text =
        row.diagnosis.factors.empty() ? distributed.detail : row.diagnosis.text + "; " + distributed.detail;
  }
  return row;
}

}  // namespace magic::checks
