#include "checks/planted_variants.h"

#include <functional>
#include <map>
#include <stdexcept>

#include "lib/dist/collectives.h"

namespace magic::checks {
namespace {

using dist::Convention;
using dist::DataParallel;
using dist::Group;
using dist::PoolRole;
using dist::ThreePoolConventions;
using dist::ThreePoolLayout;

// --- data parallelism (mesh) ---

// Local mean and AVG reduction whatever the convention says: exact only on equal shards.
class AvgOnUnevenShards : public DataParallel {
 public:
  using DataParallel::DataParallel;
  double mean_denominator(double local) const override { return std::max(local, 1.0); }
  TensorTree apply_convention(const TensorTree& grads) const override { return scale(grads, 1.0 / group().size()); }
};

// SUM reduction of losses normalized by each rank's own count.
class LocalNormalizer : public DataParallel {
 public:
  using DataParallel::DataParallel;
  double mean_denominator(double local) const override { return std::max(local, 1.0); }
};

// The gradient is never reduced.
class MissingReduce : public DataParallel {
 public:
  using DataParallel::DataParallel;
  TensorTree enter(const TensorTree& params) const override { return params; }
};

// The replicated parameters enter through an op whose backward is all_reduce_sum.
class ReplicatedAllReduceBackward : public DataParallel {
 public:
  using DataParallel::DataParallel;
  TensorTree enter(const TensorTree& params) const override {
    return params.map([this](const at::Tensor& p) { return dist::copy_to_group_allreduce_backward(p, group()); });
  }
};

// The gradient is summed outside autograd, DDP-hook style.
class DetachedCollective : public DataParallel {
 public:
  using DataParallel::DataParallel;
  TensorTree enter(const TensorTree& params) const override { return params; }
  TensorTree reduce_gradient(const TensorTree& grads) const override {
    return grads.map([this](const at::Tensor& g) { return dist::all_reduce_sum_detached(g, group()); });
  }
};

// The assembled scores are divided by dp once more.
class ExtraDivideScores : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override {
    return DataParallel::assemble_weight_gradient(local) / group().size();
  }
};

template <typename Variant>
std::function<std::shared_ptr<const DataParallelism>(std::shared_ptr<const Group>, Convention)> make() {
  return [](std::shared_ptr<const Group> g, Convention c) { return std::make_shared<Variant>(std::move(g), c); };
}

// --- three-pool conventions ---

// The CI pool averages its gradient reduction.
class AvgCiReduce : public ThreePoolConventions {
  TensorTree reduced_gradient(PoolRole role, const TensorTree& grads, const ThreePoolLayout& layout) const override {
    return role == PoolRole::kCi ? scale(grads, 1.0 / layout.n_ci()) : grads;
  }
};

// The gates' consumers pre-scale the cotangent they send back by n_ci (value unchanged).
class PrescaleCi : public ThreePoolConventions {
  at::Tensor consumed_gates(const at::Tensor& gates, const ThreePoolLayout& layout) const override {
    const auto k = static_cast<double>(layout.n_ci());
    return k * gates + (1.0 - k) * gates.detach();
  }
};

// Every block rank adds the replicated faithfulness term.
class FaithOnAllRanks : public ThreePoolConventions {
  double faithfulness_coefficient(bool) const override { return 1.0; }
};

// Each block averages its gradient reduction.
class AvgBlockReduce : public ThreePoolConventions {
  TensorTree reduced_gradient(PoolRole role, const TensorTree& grads, const ThreePoolLayout& layout) const override {
    return role == PoolRole::kBlock ? scale(grads, 1.0 / layout.n_per_block()) : grads;
  }
};

// Every CI rank adds the importance term of the all-reduced sum.
class GlobalSumAllReduceBackward : public ThreePoolConventions {
  double importance_coefficient(bool) const override { return 1.0; }
};

// The global sum as local + detached residual, the term on every rank: exact first derivatives,
// second-order cross-rank terms lost.
class DetachedGlobalResidual : public ThreePoolConventions {
  at::Tensor importance_sum(const at::Tensor& local, const Group& ci) const override {
    return dist::with_global_value(local, ci);
  }
  double importance_coefficient(bool) const override { return 1.0; }
};

// Each PPGD rank returns the pool's summed V/U cotangent instead of its own.
class PpgdBroadcastAllRanks : public ThreePoolConventions {
  TensorTree ppgd_components(const TensorTree& vu, const Group& ppgd) const override {
    return vu.map([&](const at::Tensor& x) { return dist::copy_to_group(x, ppgd); });
  }
};

}  // namespace

std::shared_ptr<const DataParallelism> planted_data_parallel(const std::string& mutation,
                                                             std::shared_ptr<const Group> group,
                                                             Convention convention) {
  static const std::map<std::string,
                        std::function<std::shared_ptr<const DataParallelism>(std::shared_ptr<const Group>, Convention)>>
      variants{{"", make<DataParallel>()},
               {"avg-on-uneven-shards", make<AvgOnUnevenShards>()},
               {"local-normalizer", make<LocalNormalizer>()},
               {"missing-reduce", make<MissingReduce>()},
               {"replicated-allreduce-backward", make<ReplicatedAllReduceBackward>()},
               {"detached-collective", make<DetachedCollective>()},
               {"extra-divide-scores", make<ExtraDivideScores>()}};
  const auto it = variants.find(mutation);
  if (it == variants.end()) throw std::logic_error("no data-parallel variant for mutation '" + mutation + "'");
  return it->second(std::move(group), convention);
}

std::shared_ptr<const ThreePoolConventions> planted_three_pool_conventions(const std::string& mutation) {
  static const std::map<std::string, std::shared_ptr<const ThreePoolConventions>> variants{
      {"", std::make_shared<ThreePoolConventions>()},
      {"avg-ci-reduce", std::make_shared<AvgCiReduce>()},
      {"prescale-ci", std::make_shared<PrescaleCi>()},
      {"faith-on-all-ranks", std::make_shared<FaithOnAllRanks>()},
      {"avg-block-reduce", std::make_shared<AvgBlockReduce>()},
      {"global-sum-allreduce-backward", std::make_shared<GlobalSumAllReduceBackward>()},
      {"detached-global-residual", std::make_shared<DetachedGlobalResidual>()},
      {"ppgd-broadcast-all-ranks", std::make_shared<PpgdBroadcastAllRanks>()}};
  const auto it = variants.find(mutation);
  if (it == variants.end()) throw std::logic_error("no three-pool variant for mutation '" + mutation + "'");
  return it->second;
}

}  // namespace magic::checks
