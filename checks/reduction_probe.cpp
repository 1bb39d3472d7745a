#include "checks/reduction_probe.h"

#include <torch/csrc/autograd/custom_function.h>

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

void ReductionTap::record(const std::string& name, const at::Tensor& cotangent) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  const at::Tensor wide = cotangent.detach().to(at::kDouble);
  Partial& p = partials_[name];
  p.sum = p.sum.defined() ? p.sum + wide : wide.clone();
  p.magnitude = p.magnitude.defined() ? p.magnitude + wide.abs() : wide.abs();
}

std::map<std::string, Partial> ReductionTap::take(const TensorTree& shapes) {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  std::map<std::string, Partial> out;
  for (const auto& p : shapes) {
    const auto it = partials_.find(p.name);
    const at::Tensor zeros = at::zeros(p.tensor.sizes(), at::kDouble);
    out[p.name] = it != partials_.end() ? it->second : Partial{zeros, zeros};
  }
  partials_.clear();
  return out;
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
      return p.is_floating_point() ? TapFunction::apply(p, tap_.get(), name) : p;
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

ReductionTerms exact_reduction(const dist::Group& world, const Partial& partial, double c, int64_t micro_batches) {
  const at::Tensor both = world.sum(at::stack({partial.sum, partial.magnitude}));
  return ReductionTerms{both[0] * c, both[1] * c, world.size(), c, micro_batches};
}

bool has_reduction_rows(const CheckSettings& settings) {
  // Not yet on tensor-parallel layouts: the probe's terms are whole-shaped, tp ranks hold pieces.
  return settings.precision.low_precision() && settings.resolved_workload() == "lm" && settings.topology.tp() == 1;
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
