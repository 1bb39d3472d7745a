#include "checks/planted_pipeline.h"

#include "checks/forwarding_step.h"
#include "lib/core/derivative_scale.h"

namespace magic::checks {
namespace {

constexpr const char* kFreshOptimizer = "replay-restore-fresh-optimizer";
constexpr const char* kQueryGradScaled = "query-grad-scaled";
constexpr const char* kOptCotangentScaled = "replay-opt-cotangent-keeps-loss-scale";
constexpr const char* kStartKeepsScale = "replay-start-keeps-loss-scale";

// A model-only load: the checkpoint's parameters, a fresh optimizer state.
class FreshOptimizerRestore : public ForwardingStep {
 public:
  FreshOptimizerRestore(const StepFunction& inner, std::shared_ptr<const Optimizer> optimizer)
      : ForwardingStep(inner), optimizer_(std::move(optimizer)) {}
  TrainState restore(const TrainState& saved, int64_t step) const override {
    TrainState restored = ForwardingStep::restore(saved, step);
    // Every saved entry that a fresh state has is replaced by its fresh value (the entries stay the
    // same: the three-pool workload keeps no optimizer state for its sync anchor).
    const TensorTree fresh = optimizer_->init(restored.params);
    restored.opt = restored.opt.map_named([&](const std::string& name, const at::Tensor& saved_entry) {
      return fresh.contains(name) ? fresh.at(name) : saved_entry;
    });
    return restored;
  }

 private:
  std::shared_ptr<const Optimizer> optimizer_;
};

// REPLAY's step product multiplies its cotangents by the loss scale S before the backward and
// divides after; here the optimizer state's cotangents keep S: the state enters the traced step
// with its value and S times its derivative.
class OptCotangentKeepsScale : public ForwardingStep {
 public:
  using ForwardingStep::ForwardingStep;
  StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const override {
    if (!traced) return ForwardingStep::step(s, t, w, traced);
    TrainState scaled = s;
    const double S = cotangent_scale();
    scaled.opt = s.opt.map([&](const at::Tensor& x) { return x.requires_grad() ? with_derivative_scale(x, S) : x; });
    return ForwardingStep::step(scaled, t, w, traced);
  }
};

// REPLAY starts from the query gradient of S·Q, as a loss-scaled query backward leaves it: ∂Q/∂θ_N
// is right where the run reports it, and REPLAY's start carries the loss scale S (so do the scores).
class StartKeepsScale : public ForwardingStep {
 public:
  using ForwardingStep::ForwardingStep;
  TrainState replay_start(const TrainState& state, const TensorTree& query_gradient) const override {
    TrainState lambda = ForwardingStep::replay_start(state, query_gradient);
    lambda.params = scale(lambda.params, cotangent_scale());
    return lambda;
  }
};

class EmbeddingQueryResync : public QueryFunction {
 public:
  EmbeddingQueryResync(const QueryFunction& inner, int64_t dp) : inner_(inner), dp_(static_cast<double>(dp)) {}
  int64_t num_queries() const override { return inner_.num_queries(); }
  at::Tensor loss(const TensorTree& params, std::optional<int64_t> index) const override {
    return inner_.loss(params, index);
  }
  TensorTree gradient(const TensorTree& params, std::optional<int64_t> index) const override {
    return inner_.gradient(params, index).map_named([this](const std::string& name, const at::Tensor& g) {
      return name == "tok_emb" || name == "pos_emb" ? g * dp_ : g;
    });
  }

 private:
  const QueryFunction& inner_;
  double dp_;
};

}  // namespace

bool is_pipeline_mutation(const std::string& mutation) {
  return mutation == kFreshOptimizer || mutation == kQueryGradScaled || mutation == kOptCotangentScaled ||
         mutation == kStartKeepsScale;
}

std::shared_ptr<const StepFunction> planted_step(const std::string& mutation, const StepFunction& inner,
                                                 std::shared_ptr<const Optimizer> optimizer) {
  if (mutation == kFreshOptimizer) return std::make_shared<FreshOptimizerRestore>(inner, std::move(optimizer));
  if (mutation == kOptCotangentScaled) return std::make_shared<OptCotangentKeepsScale>(inner);
  if (mutation == kStartKeepsScale) return std::make_shared<StartKeepsScale>(inner);
  return std::shared_ptr<const StepFunction>(&inner, [](const StepFunction*) {});
}

std::shared_ptr<const QueryFunction> planted_query(const std::string& mutation, const QueryFunction& inner,
                                                   int64_t dp) {
  if (mutation == kQueryGradScaled) return std::make_shared<EmbeddingQueryResync>(inner, dp);
  // The correct query: a wrapper adds nothing, so the object itself (not owned) is handed back.
  return std::shared_ptr<const QueryFunction>(&inner, [](const QueryFunction*) {});
}

}  // namespace magic::checks
