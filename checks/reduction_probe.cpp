#include "checks/reduction_probe.h"

#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "checks/forwarding_parallelism.h"

namespace magic::checks {

void ReductionTap::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  partials_.clear();
  armed_ = true;
}

bool ReductionTap::armed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return armed_;
}

void ReductionTap::entered(const std::string& name, const at::Tensor& parameter) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || partials_.count(name) > 0) return;
  const at::Tensor zeros = at::zeros(parameter.sizes(), parameter.options().dtype(at::kDouble));
  partials_[name] = Partial{zeros, zeros.clone()};
}

void ReductionTap::record(const std::string& name, const at::Tensor& cotangent) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  const at::Tensor wide = cotangent.detach().to(at::kDouble);
  Partial& p = partials_[name];
  p.sum = p.sum.defined() ? p.sum + wide : wide.clone();
  p.magnitude = p.magnitude.defined() ? p.magnitude + wide.abs() : wide.abs();
}

std::map<std::string, Partial> ReductionTap::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  return std::exchange(partials_, {});
}

namespace {

// Identity forward; the backward records the cotangent (the rank's local gradient, before any
// collective touched it) and returns it unchanged.
struct TapFunction : torch::autograd::Function<TapFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, ReductionTap* tap,
                            const std::string& name) {
    ctx->saved_data["tap"] = reinterpret_cast<int64_t>(tap);
    ctx->saved_data["name"] = name;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    reinterpret_cast<ReductionTap*>(ctx->saved_data["tap"].toInt())
        ->record(ctx->saved_data["name"].toStringRef(), grad[0]);
    return {grad[0], at::Tensor(), at::Tensor()};
  }
};

class TappedParallelism : public ForwardingParallelism {
 public:
  TappedParallelism(std::shared_ptr<const Parallelism> inner, std::shared_ptr<ReductionTap> tap)
      : ForwardingParallelism(std::move(inner)), tap_(std::move(tap)) {}

  TensorTree enter(const TensorTree& params) const override {
    TensorTree entered = ForwardingParallelism::enter(params);
    if (!tap_->armed()) return entered;
    return entered.map_named([this](const std::string& name, const at::Tensor& p) {
      if (!p.is_floating_point()) return p;
      tap_->entered(name, p);
      return TapFunction::apply(p, tap_.get(), name);
    });
  }

 private:
  std::shared_ptr<ReductionTap> tap_;
};

}  // namespace

std::shared_ptr<const Parallelism> tapped_parallelism(std::shared_ptr<const Parallelism> inner,
                                                      std::shared_ptr<ReductionTap> tap) {
  return std::make_shared<TappedParallelism>(std::move(inner), std::move(tap));
}

std::map<std::string, ReductionTerms> exact_reductions(const Parallelism& parallelism,
                                                       const std::map<std::string, Partial>& partials, double c,
                                                       int64_t micro_batches) {
  // Σ and Σ|·| side by side on a trailing dimension: one reduction for both (every split joins
  // along dim 0 or 1).
  TensorTree both;
  for (const auto& [name, p] : partials) both.insert(name, at::stack({p.sum, p.magnitude}, -1));
  const ReductionGroupSums exact = parallelism.sum_over_reduction_groups(both);
  std::map<std::string, ReductionTerms> out;
  for (const auto& [name, ranks] : exact.ranks) {
    const at::Tensor& whole = exact.whole.at(name);
    out[name] = ReductionTerms{whole.select(-1, 0) * c, whole.select(-1, 1) * c, ranks, c, micro_batches};
  }
  return out;
}

bool has_reduction_rows(const CheckSettings& settings) {
  return settings.precision.low_precision() && settings.resolved_workload() == "lm";
}

std::string reduction_row_name(const std::string& gradient) {
  return gradient + "[reduction]";
}

void append_reduction_outputs(PipelineOutputs& out, const std::vector<TensorTree>& step_grads,
                              const std::vector<std::map<std::string, ReductionTerms>>& step_sums) {
  for (const auto& p : step_grads.front()) {
    std::vector<at::Tensor> reduced, exact, magnitude;
    for (size_t t = 0; t < step_grads.size(); ++t) {
      const ReductionTerms& sums = step_sums.at(t).at(p.name);
      reduced.push_back(step_grads[t].at(p.name).reshape({-1}));
      exact.push_back(sums.exact.reshape({-1}));
      magnitude.push_back(sums.magnitude.reshape({-1}));
    }
    const ReductionTerms& first = step_sums.front().at(p.name);
    NamedTensor row{"grad", reduction_row_name(p.name), at::cat(reduced)};
    row.reduction = ReductionTerms{at::cat(exact), at::cat(magnitude), first.terms, first.c, first.micro_batches};
    row.step_shape = p.tensor.sizes().vec();
    out.push_back(std::move(row));
  }
}

}  // namespace magic::checks
