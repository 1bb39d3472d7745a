#include "checks/planted_precision.h"

#include <torch/csrc/autograd/custom_function.h>

#include <functional>
#include <map>

namespace magic::checks {
namespace {

// The gradients keep the loss scale: the update sees S·g.
class LossScaleNotUnscaled : public MixedPrecision {
 public:
  using MixedPrecision::MixedPrecision;
  TensorTree unscale(const TensorTree& grads) const override { return grads; }
};

// Unscaled twice: g / S².
class UnscaleTwice : public MixedPrecision {
 public:
  using MixedPrecision::MixedPrecision;
  TensorTree unscale(const TensorTree& grads) const override {
    return MixedPrecision::unscale(MixedPrecision::unscale(grads));
  }
};

// The policy says reduce in the master dtype; the code casts to the compute dtype first.
class ReduceInComputeDtype : public MixedPrecision {
 public:
  explicit ReduceInComputeDtype(const PrecisionPolicy& policy) : MixedPrecision(policy), as_coded_(as_coded(policy)) {}
  TensorTree entered_params(const Parallelism& parallelism, const TensorTree& stored) const override {
    return as_coded_.entered_params(parallelism, stored);
  }
  TensorTree reduce(const Parallelism& parallelism, const TensorTree& grads) const override {
    return as_coded_.reduce(parallelism, grads);
  }

 private:
  static PrecisionPolicy as_coded(PrecisionPolicy p) {
    p.reduce = p.compute;
    return p;
  }
  MixedPrecision as_coded_;
};

// The update is applied to weights stored in the compute dtype: θ' = compute(update(θ, g)).
class MasterWeightsInComputeDtype : public MixedPrecision {
 public:
  using MixedPrecision::MixedPrecision;
  TensorTree store(const TensorTree& updated) const override {
    return cast_floating(cast_floating(updated, policy().compute), policy().master);
  }
};

// The micro-batches' gradients accumulated in a buffer of the compute dtype, as the policy's
// master copy were not there: the running sum and each new term rounded to compute, then widened.
class AccumulateInComputeDtype : public MixedPrecision {
 public:
  using MixedPrecision::MixedPrecision;
  TensorTree accumulate(const TensorTree& sum, const TensorTree& micro_batch) const override {
    return cast_floating(add(cast_floating(sum, policy().compute), cast_floating(micro_batch, policy().compute)),
                         policy().master);
  }
};

// Identity forward; backward g -> divisor · fp16(g / divisor), carried in g's dtype: what the
// sum receives after DDP's fp16 compression with a predivide factor (the multiply back after the
// sum is exact for a power of two, and moved before it here so that the rest of the graph,
// second order included, is the correct one).
struct PredivideInFp16 : torch::autograd::Function<PredivideInFp16> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double divisor) {
    ctx->saved_data["divisor"] = divisor;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const double divisor = ctx->saved_data["divisor"].toDouble();
    return {(grad[0] / divisor).to(at::kHalf).to(grad[0].scalar_type()) * divisor, at::Tensor()};
  }
};

// Each rank's gradient, unscaled and divided by the world size in fp16 before the SUM: entries
// below fp16's range there underflow to subnormals or zero.
class Fp16PredivideUnderflow : public MixedPrecision {
 public:
  Fp16PredivideUnderflow(const PrecisionPolicy& policy, int world_size)
      : MixedPrecision(policy), divisor_(policy.loss_scale * world_size) {}
  TensorTree entered_params(const Parallelism& parallelism, const TensorTree& stored) const override {
    return parallelism.enter(stored.map(
        [this](const at::Tensor& p) { return p.is_floating_point() ? PredivideInFp16::apply(p, divisor_) : p; }));
  }

 private:
  double divisor_;
};

// Measurement only (bench/precision_sensitivity): the reduced gradient times c.
class ScaledGradient : public MixedPrecision {
 public:
  ScaledGradient(const PrecisionPolicy& policy, double c) : MixedPrecision(policy), c_(c) {}
  TensorTree reduce(const Parallelism& parallelism, const TensorTree& grads) const override {
    return scale(MixedPrecision::reduce(parallelism, grads), c_);
  }

 private:
  double c_;
};

using Factory = std::function<std::shared_ptr<const MixedPrecision>(const PrecisionPolicy&, int)>;

template <typename Variant>
Factory make() {
  return [](const PrecisionPolicy& policy, int) { return std::make_shared<Variant>(policy); };
}

const std::map<std::string, Factory>& variants() {
  static const std::map<std::string, Factory> v{
      {"fp16-loss-scale-not-unscaled", make<LossScaleNotUnscaled>()},
      {"fp16-unscale-twice", make<UnscaleTwice>()},
      {"reduce-in-compute-dtype", make<ReduceInComputeDtype>()},
      {"master-weights-in-compute-dtype", make<MasterWeightsInComputeDtype>()},
      {"accumulate-in-compute-dtype", make<AccumulateInComputeDtype>()},
      {"fp16-predivide-underflow", [](const PrecisionPolicy& policy,
                                      int world) { return std::make_shared<Fp16PredivideUnderflow>(policy, world); }},
  };
  return v;
}

}  // namespace

bool is_precision_mutation(const std::string& mutation) {
  return variants().count(mutation) > 0 || mutation.rfind(kScaledGradientPrefix, 0) == 0;
}

std::shared_ptr<const MixedPrecision> planted_precision(const std::string& mutation, const PrecisionPolicy& policy,
                                                        int world_size) {
  if (mutation.rfind(kScaledGradientPrefix, 0) == 0) {
    return std::make_shared<ScaledGradient>(policy,
                                            std::stod(mutation.substr(std::string(kScaledGradientPrefix).size())));
  }
  const auto it = variants().find(mutation);
  return it == variants().end() ? std::make_shared<MixedPrecision>(policy) : it->second(policy, world_size);
}

}  // namespace magic::checks
