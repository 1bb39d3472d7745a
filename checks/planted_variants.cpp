#include "checks/planted_variants.h"

#include "lib/distributed/parallel/tensor_parallel_group.h"
#include "lib/model/kernel_fallback.h"

#include "lib/core/derivative_scale.h"

#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include <torch/csrc/autograd/custom_function.h>

#include "checks/planted_micro_batches.h"
#include "checks/planted_pipeline.h"
#include "checks/planted_pipeline_stages.h"
#include "checks/planted_precision.h"
#include "lib/distributed/collectives/collectives.h"

namespace magic::checks {
namespace {

using dist::ContextParallel;
using dist::Convention;
using dist::DataParallel;
using dist::Group;
using dist::MeshGroups;
using dist::MeshParts;
using dist::PoolRole;
using dist::ShardedParameters;
using dist::ThreePoolConventions;
using dist::ThreePoolLayout;

// --- data parallelism (mesh): rows, normalizer, conventions, scores ---

// Local mean and AVG reduction whatever the convention says: exact only on equal shards.
class AvgOnUnevenShards : public DataParallel {
 public:
  using DataParallel::DataParallel;
  double mean_denominator(double local) const override { return std::max(local, 1.0); }
  TensorTree apply_convention(const TensorTree& grads) const override {
    return scale(grads, 1.0 / static_cast<double>(layout().dp() * layout().cp()));
  }
};

// SUM reduction of losses normalized by each rank's own count.
class LocalNormalizer : public DataParallel {
 public:
  using DataParallel::DataParallel;
  double mean_denominator(double local) const override { return std::max(local, 1.0); }
};

// The assembled scores are divided by dp once more.
class ExtraDivideScores : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override {
    return DataParallel::assemble_weight_gradient(local) / static_cast<double>(layout().dp());
  }
};

// On odd dp ranks REPLAY's dQ/dw lands one position later (a per-token weight misaligned with its
// label; per-document weights: the next document's): the training run and every first-order row are
// untouched, only where the scores land moves.
class TokenWeightShifted : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override {
    const bool odd = layout().dp_index(rank()) % 2 == 1;
    return DataParallel::assemble_weight_gradient(odd ? local.roll(1, local.dim() - 1) : local);
  }
};

// The valid-label count is summed over the dp ranks of this rank's cp index only.
class CpDpOnlyNormalizer : public DataParallel {
 public:
  using DataParallel::DataParallel;
  double mean_denominator(double local) const override {
    at::Tensor by_cp_index = at::zeros({layout().cp()}, at::kDouble);
    by_cp_index[layout().cp_index(rank())] = local;
    // Each of the tp ranks of a row shard, on every pipeline stage, holds its labels: counted once.
    const double copies = static_cast<double>(layout().tp() * layout().pp());
    const double count = world().sum(by_cp_index)[layout().cp_index(rank())].item<double>() / copies;
    return std::max(count, 1.0);
  }
};

// --- clipping and the optimizer's input ---

// Identity forward; the backward keeps the cotangent (with its graph, for REPLAY) in `stash`.
struct StashCotangent : torch::autograd::Function<StashCotangent> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t stash,
                            const std::string& name) {
    ctx->saved_data["stash"] = stash;
    ctx->saved_data["name"] = name;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad);
};

// The clip coefficient from this rank's local gradient, before any collective summed it.
class LocalClipNorm : public DataParallel {
 public:
  using DataParallel::DataParallel;
  TensorTree enter(const TensorTree& params) const override {
    return DataParallel::enter(params).map_named([this](const std::string& name, const at::Tensor& p) {
      return p.is_floating_point() ? StashCotangent::apply(p, reinterpret_cast<int64_t>(this), name) : p;
    });
  }
  at::Tensor global_squares(const TensorTree& grads) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    at::Tensor squares = at::zeros({}, grads.begin()->tensor.options());
    for (const auto& [name, local] : local_) squares = squares + (local * local).sum();
    return squares;
  }
  void keep(const std::string& name, const at::Tensor& local) const {
    std::lock_guard<std::mutex> lock(mutex_);
    local_[name] = local;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::map<std::string, at::Tensor> local_;
};

torch::autograd::variable_list StashCotangent::backward(torch::autograd::AutogradContext* ctx,
                                                        torch::autograd::variable_list grad) {
  reinterpret_cast<const LocalClipNorm*>(ctx->saved_data["stash"].toInt())
      ->keep(ctx->saved_data["name"].toStringRef(), grad[0]);
  return {grad[0], at::Tensor(), at::Tensor()};
}

// The norm of this rank's shard of the gradient, not summed over the shard group.
class ShardNormNotReduced : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor global_squares(const TensorTree& grads) const override { return dot(grads, grads); }
};

// The clip norm taken as a constant (as under no_grad, or .item()): the same training values, but
// REPLAY's product misses c's own derivative.
class DetachedClipNorm : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor global_squares(const TensorTree& grads) const override {
    return DataParallel::global_squares(grads).detach();
  }
};

// The embeddings' gradient summed once more over the dp replicas after clipping: x dp.
class EmbeddingResync : public DataParallel {
 public:
  using DataParallel::DataParallel;
  TensorTree optimizer_input(const TensorTree& clipped) const override {
    const auto dp = static_cast<double>(layout().dp());
    return clipped.map_named([dp](const std::string& name, const at::Tensor& g) {
      return name == "tok_emb" || name == "pos_emb" ? g * dp : g;
    });
  }
};

// --- parameters (sharded): how a stored shard enters the computation ---

// A DataParallel with one part replaced by a planted variant of it: a ContextParallel variant is
// built from the cp group, a TensorParallel variant from the tp group, a ShardedParameters
// variant from the mesh's groups.
template <typename Part>
class WithPart : public DataParallel {
 public:
  WithPart(MeshParts parts, Convention convention) : DataParallel(replaced(std::move(parts)), convention) {}

 private:
  static MeshParts replaced(MeshParts parts) {
    if constexpr (std::is_base_of_v<ContextParallel, Part>) {
      parts.context = std::make_shared<Part>(parts.groups.cp, parts.context ? parts.context->sequence_shards() : 1,
                                             parts.context && parts.context->ring());
    } else if constexpr (std::is_base_of_v<TensorParallel, Part>) {
      // Without a tp group (tp = 1) there is nothing to plant: the catalog needs tp >= 2.
      if (parts.groups.tp) parts.tensor = std::make_shared<Part>(parts.groups.tp, parts.sequence_parallel);
    } else {
      parts.parameters = std::make_shared<Part>(parts.groups);
    }
    return parts;
  }
};

// The shards' squares all-reduced with an all-reduce backward, c scaling each shard as it is: right
// for one mesh, where the backward's sum over the shard group is c's whole derivative. Beside a
// bridge's other side it sums that side's share of c's derivative too, over this side's shard group.
class ShardSquaresAllReduced : public ShardedParameters {
 public:
  explicit ShardSquaresAllReduced(const MeshGroups& g) : ShardedParameters(g.shard, g.replica) {}
  at::Tensor sum_squares(const at::Tensor& squares) const override {
    return shards() == 1 ? squares : dist::all_reduce_sum(squares, shard_group());
  }
  at::Tensor enter_coefficient(const at::Tensor& coefficient) const override { return coefficient; }
};

// No sum across the ranks holding a shard: the gradient is never reduced there.
class NoReplicaSum : public ShardedParameters {
 public:
  explicit NoReplicaSum(const MeshGroups& g) : ShardedParameters(g.shard, g.replica) {}
  at::Tensor enter_replicas(const at::Tensor& shard) const override { return shard; }
};

// The replicated shard enters through an op whose backward is all_reduce_sum.
class ReplicaAllReduceBackward : public ShardedParameters {
 public:
  explicit ReplicaAllReduceBackward(const MeshGroups& g) : ShardedParameters(g.shard, g.replica) {}
  at::Tensor enter_replicas(const at::Tensor& shard) const override {
    return dist::copy_to_group_allreduce_backward(shard, replica_group());
  }
};

// The gradient is summed across replicas outside autograd, DDP-hook style (under sp the
// replicated parameters' over the tp ranks as well, as their bucket would have).
class DetachedCollective : public WithPart<NoReplicaSum> {
 public:
  TensorTree reduce_gradient(const TensorTree& grads) const override {
    return grads.map_named([this](const std::string& name, const at::Tensor& g) {
      const bool over_tp = parts().sequence_parallel && !split_over_tp(name);
      return dist::all_reduce_sum_detached(g, over_tp ? *replica_tp_ : *replica_);
    });
  }
  DetachedCollective(MeshParts parts, Convention convention)
      : WithPart<NoReplicaSum>(unsummed(parts), convention),
        replica_(parts.groups.replica),
        replica_tp_(parts.groups.replica_tp) {}

 private:
  static MeshParts unsummed(MeshParts parts) {
    if (parts.summed_over_tp) parts.summed_over_tp = std::make_shared<ShardedParameters>(parts.groups.shard, nullptr);
    return parts;
  }
  std::shared_ptr<const Group> replica_, replica_tp_;
};

// The shard's gradient is summed over the cp ranks but not across the replicas (hybrid sharding).
class NoCrossReplicaSum : public ShardedParameters {
 public:
  explicit NoCrossReplicaSum(const MeshGroups& g) : ShardedParameters(g.shard, g.replica), cp_(g.cp) {}
  at::Tensor enter_replicas(const at::Tensor& shard) const override {
    return cp_ ? dist::copy_to_group(shard, *cp_) : shard;
  }

 private:
  std::shared_ptr<const Group> cp_;
};

// The all-gather's backward reduce-scatters with AVG: the shard gradient divided by fsdp.
// s(x) = x/F + (x - x/F).detach() has the value x and the derivative 1/F.
class GatherAvgBackward : public ShardedParameters {
 public:
  explicit GatherAvgBackward(const MeshGroups& g) : ShardedParameters(g.shard, g.replica) {}
  at::Tensor all_gather_padded(const at::Tensor& padded) const override {
    const at::Tensor divided = padded / static_cast<double>(shards());
    return ShardedParameters::all_gather_padded(divided + (padded - divided).detach());
  }
};

// all_gather whose backward reduce-scatters outside autograd: right first derivatives, but the
// gradient is a constant to any further differentiation.
struct GatherOnceDifferentiable : torch::autograd::Function<GatherOnceDifferentiable> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return dist::find_group(group)->all_gather(x.detach(), 0);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto group = dist::find_group(ctx->saved_data["group"].toInt());
    return {group->reduce_scatter_sum(grad[0].detach(), 0), at::Tensor()};
  }
};

class GatherBackwardOutsideAutograd : public ShardedParameters {
 public:
  explicit GatherBackwardOutsideAutograd(const MeshGroups& g) : ShardedParameters(g.shard, g.replica) {}
  at::Tensor all_gather_padded(const at::Tensor& padded) const override {
    return GatherOnceDifferentiable::apply(padded, shard_group().id());
  }
};

// --- context parallel: how a sequence is split and attention reaches the other chunks ---

// all_gather along dim 2 whose backward keeps only this rank's slice of the cotangent.
struct GatherKeepLocalCotangent : torch::autograd::Function<GatherKeepLocalCotangent> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    const auto g = dist::find_group(group);
    ctx->saved_data["rank"] = static_cast<int64_t>(g->rank());
    ctx->saved_data["length"] = x.size(2);
    return g->all_gather(x.detach(), 2);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const int64_t length = ctx->saved_data["length"].toInt();
    return {grad[0].narrow(2, ctx->saved_data["rank"].toInt() * length, length), at::Tensor()};
  }
};

class KvGradNotSummed : public ContextParallel {
 public:
  using ContextParallel::ContextParallel;
  at::Tensor gather_keys(const at::Tensor& kv) const override {
    return GatherKeepLocalCotangent::apply(kv.contiguous(), group().id());
  }
};

// Ring attention whose backward sends each block's cotangent onward, not back to its owner.
class RingCotangentOnward : public ContextParallel {
 public:
  using ContextParallel::ContextParallel;
  dist::RingSteps ring_steps() const override { return {dist::shift_ring_cotangent_onward, dist::block_product}; }
};

// a·block forward, the backward of a·own: a hand-written ring backward that recomputes every
// step with the first block's K/V (its own): dQ and dP wrong, the other blocks' dK/dV never sent.
//   a·own + (a·block − a·own).detach()
at::Tensor product_reusing_own_block(const at::Tensor& a, const at::Tensor& block, const at::Tensor& own) {
  const at::Tensor with_own = at::matmul(a, own);
  return with_own + (at::matmul(a, block) - with_own).detach();
}

class RingBackwardReusesFirstBlock : public ContextParallel {
 public:
  using ContextParallel::ContextParallel;
  dist::RingSteps ring_steps() const override { return {dist::shift_ring, product_reusing_own_block}; }
};

// Rank r computes the contiguous chunks 2r and 2r+1 while positions and mask assume zig-zag.
class ContiguousChunks : public ContextParallel {
 public:
  using ContextParallel::ContextParallel;
  at::Tensor columns(int64_t padded_length) const override {
    const int64_t local = padded_length / size();
    return at::arange(group().rank() * local, (group().rank() + 1) * local, at::kLong);
  }
};

// Position ids restart at 0 on every cp rank (the mask still uses the true positions).
class LocalPositions : public ContextParallel {
 public:
  using ContextParallel::ContextParallel;
  at::Tensor position_ids(int64_t padded_length) const override {
    return at::arange(padded_length / size(), at::kLong);
  }
};

// --- tensor parallel: the model's collectives and the loss's reductions ---

// The row-parallel bias added on every rank before the sum over tp: counted tp times.
class RowBiasPerRank : public dist::TensorParallelGroup {
 public:
  using TensorParallelGroup::TensorParallelGroup;
  at::Tensor row_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const override {
    return leave_row(kernels::linear(x, weight, bias), 1);
  }
};

// A column-parallel linear entered through a plain identity (no all-reduce in its backward): the
// gradient before it keeps only this rank's columns' share.
class ColumnBackwardNotSummed : public dist::TensorParallelGroup {
 public:
  using TensorParallelGroup::TensorParallelGroup;
  at::Tensor enter_column(const at::Tensor& x, int64_t sequence_dim) const override {
    return sequence_parallel() ? TensorParallelGroup::enter_column(x, sequence_dim) : x;
  }
};

// The softmax shifted by this rank's own max: each rank's Σexp terms are scaled differently.
class LossMaxLocal : public dist::TensorParallelGroup {
 public:
  using TensorParallelGroup::TensorParallelGroup;
  at::Tensor loss_shift(const at::Tensor& local_max) const override { return local_max.detach(); }
};

// Σexp over this rank's vocabulary shard only.
class LossSumExpLocal : public dist::TensorParallelGroup {
 public:
  using TensorParallelGroup::TensorParallelGroup;
  at::Tensor loss_sum_exp(const at::Tensor& partial) const override { return partial; }
};

// The target's logit from this rank's vocabulary shard only (0 where another rank holds the
// target): each rank's loss value is wrong, every gradient exact (a rank's dℓ/d(own logits) is
// softmax − one-hot on its shard either way): only grad/loss sees it.
class LossTargetLogitLocal : public dist::TensorParallelGroup {
 public:
  using TensorParallelGroup::TensorParallelGroup;
  at::Tensor loss_target_logit(const at::Tensor& partial) const override { return partial; }
};

// Label smoothing's Σ_v x_v over this rank's vocabulary shard only: as above, the value alone.
class SmoothingLocalVocabulary : public dist::TensorParallelGroup {
 public:
  using TensorParallelGroup::TensorParallelGroup;
  at::Tensor loss_logit_sum(const at::Tensor& partial) const override { return partial; }
};

// Under sp, the sequence all-gather before a column-parallel linear keeps only this rank's shard
// of the cotangent in its backward (no reduce-scatter): the other ranks' columns' share is lost.
class SequenceGatherBackwardLocal : public dist::TensorParallelGroup {
 public:
  using TensorParallelGroup::TensorParallelGroup;
  at::Tensor enter_column(const at::Tensor& x, int64_t sequence_dim) const override {
    if (!sequence_parallel()) return TensorParallelGroup::enter_column(x, sequence_dim);
    std::vector<at::Tensor> shards =
        group().all_gather(x.detach().contiguous(), sequence_dim).chunk(size(), sequence_dim);
    shards[static_cast<size_t>(index())] = x;
    return at::cat(shards, sequence_dim);
  }
};

// Under sp, the replicated parameters (layer norms, positions, row-parallel biases) enter like the
// tensor-parallel pieces: their partial gradients are never summed across tp, and the replicas drift.
class SpReplicatedGradientNotSummed : public DataParallel {
 public:
  SpReplicatedGradientNotSummed(MeshParts parts, Convention convention)
      : DataParallel(without_tp_sum(std::move(parts)), convention) {}

 private:
  static MeshParts without_tp_sum(MeshParts parts) {
    parts.summed_over_tp = nullptr;
    return parts;
  }
};

// The clip norm sums every parameter over tp, the replicated ones included: counted tp times.
class NormReplicatedPerTpRank : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor global_squares(const TensorTree& grads) const override {
    return parts().parameters->sum_squares(dist::reduce_from_group(dot(grads, grads), *parts().groups.tp));
  }
};

// The clip norm from this tp rank's pieces alone (no sum over tp).
class NormOneTpRank : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor global_squares(const TensorTree& grads) const override {
    return parts().parameters->sum_squares(dot(grads, grads));
  }
};

// REPLAY's dQ/dw summed over every rank, tp included, though the tp ranks' copies agree: x tp.
class WeightGradientSummedOverTp : public DataParallel {
 public:
  using DataParallel::DataParallel;
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override { return world().sum(local); }
};

template <typename Variant>
std::function<std::shared_ptr<const Parallelism>(MeshParts, Convention)> make() {
  return [](MeshParts parts, Convention c) { return std::make_shared<Variant>(std::move(parts), c); };
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
    return with_derivative_scale(gates, static_cast<double>(layout.n_ci()));
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

// Every pool rank adds its pool's whole ||g||² to the clip's norm.
class ClipNormEveryReplica : public ThreePoolConventions {
  double clip_squares_share(int64_t) const override { return 1.0; }
};

// REPLAY's δw averaged over the world instead of summed.
class AvgWeightGradient : public ThreePoolConventions {
  double weight_gradient_scale(int world_size) const override { return 1.0 / world_size; }
};

// The clip's norm is exact; its backward takes every replica's whole cotangent of c.
class ClipCotangentEveryReplica : public ThreePoolConventions {
  double clip_cotangent_share(int64_t) const override { return 1.0; }
};

}  // namespace

std::shared_ptr<const Parallelism> planted_data_parallel(const std::string& mutation, dist::MeshParts parts,
                                                         Convention convention) {
  static const std::map<std::string, std::function<std::shared_ptr<const Parallelism>(MeshParts, Convention)>> variants{
      {"", make<DataParallel>()},
      {"avg-on-uneven-shards", make<AvgOnUnevenShards>()},
      {"local-normalizer", make<LocalNormalizer>()},
      {"missing-reduce", make<WithPart<NoReplicaSum>>()},
      {"replicated-allreduce-backward", make<WithPart<ReplicaAllReduceBackward>>()},
      {"detached-collective", make<DetachedCollective>()},
      {"extra-divide-scores", make<ExtraDivideScores>()},
      {"token-weight-shifted", make<TokenWeightShifted>()},
      {"cp-dp-only-normalizer", make<CpDpOnlyNormalizer>()},
      {"cp-kv-grad-not-summed", make<WithPart<KvGradNotSummed>>()},
      {"ring-cotangent-onward", make<WithPart<RingCotangentOnward>>()},
      {"ring-backward-reuses-first-block", make<WithPart<RingBackwardReusesFirstBlock>>()},
      {"cp-contiguous-chunks", make<WithPart<ContiguousChunks>>()},
      {"cp-local-positions", make<WithPart<LocalPositions>>()},
      {"fsdp-avg-and-divide", make<WithPart<GatherAvgBackward>>()},
      {"fsdp-gather-once-differentiable", make<WithPart<GatherBackwardOutsideAutograd>>()},
      {"hsdp-missing-replica-reduce", make<WithPart<NoCrossReplicaSum>>()},
      {"clip-local-norm", make<LocalClipNorm>()},
      {"clip-shard-norm-not-reduced", make<ShardNormNotReduced>()},
      {"clip-norm-detached", make<DetachedClipNorm>()},
      {"bridge-clip-squares-all-reduced", make<WithPart<ShardSquaresAllReduced>>()},
      {"optimizer-input-scaled", make<EmbeddingResync>()},
      {"tp-row-bias-per-rank", make<WithPart<RowBiasPerRank>>()},
      {"tp-column-backward-not-summed", make<WithPart<ColumnBackwardNotSummed>>()},
      {"tp-loss-max-local", make<WithPart<LossMaxLocal>>()},
      {"tp-loss-sum-exp-local", make<WithPart<LossSumExpLocal>>()},
      {"tp-loss-target-logit-local", make<WithPart<LossTargetLogitLocal>>()},
      {"tp-smoothing-local-vocabulary", make<WithPart<SmoothingLocalVocabulary>>()},
      {"tp-norm-replicated-per-rank", make<NormReplicatedPerTpRank>()},
      {"tp-norm-one-rank", make<NormOneTpRank>()},
      {"tp-weight-gradient-summed", make<WeightGradientSummedOverTp>()},
      {"sp-replicated-gradient-not-summed", make<SpReplicatedGradientNotSummed>()},
      {"sp-gather-backward-local", make<WithPart<SequenceGatherBackwardLocal>>()}};
  if (is_pipeline_stage_mutation(mutation)) return planted_pipeline_stages(mutation, std::move(parts), convention);
  const bool elsewhere =
      is_precision_mutation(mutation) || is_pipeline_mutation(mutation) || is_micro_batch_mutation(mutation);
  const auto it = variants.find(elsewhere ? "" : mutation);
  if (it == variants.end()) throw std::logic_error("no data-parallel variant for mutation '" + mutation + "'");
  return it->second(std::move(parts), convention);
}

bool planted_on_both_bridge_sides(const std::string& mutation) {
  return mutation == "bridge-clip-squares-all-reduced";
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
      {"ppgd-broadcast-all-ranks", std::make_shared<PpgdBroadcastAllRanks>()},
      {"clip-norm-every-replica", std::make_shared<ClipNormEveryReplica>()},
      {"clip-cotangent-every-replica", std::make_shared<ClipCotangentEveryReplica>()},
      {"avg-weight-gradient", std::make_shared<AvgWeightGradient>()}};
  const auto it = variants.find(is_precision_mutation(mutation) || is_pipeline_mutation(mutation) ? "" : mutation);
  if (it == variants.end()) throw std::logic_error("no three-pool variant for mutation '" + mutation + "'");
  return it->second;
}

}  // namespace magic::checks
