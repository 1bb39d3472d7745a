#include "lib/distributed/parallel/data_parallel.h"

#include <algorithm>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/collectives/collectives.h"
#include "lib/distributed/parallel/pipeline_micro_batches.h"
#include "lib/distributed/parallel/tensor_parallel_group.h"

namespace magic::dist {

Convention parse_convention(const std::string& name) {
  if (name == "sum") return Convention::kSum;
  if (name == "avg") return Convention::kAvg;
  throw InputError(str_cat("--convention: unknown convention '", name, "'; expected sum or avg"));
}

std::string convention_name(Convention convention) {
  return convention == Convention::kSum ? "sum" : "avg";
}

std::pair<int64_t, int64_t> shard_range(int64_t total, int rank, int size) {
  const int64_t base = total / size, extra = total % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

TraceLayout trace_mesh(const MeshLayout& layout, int rank) {
  TraceLayout out;
  const int64_t dp_index = layout.dp_index(rank), fsdp = layout.fsdp();
  if (layout.pp() > 1) {
    out.mesh.push_back({"pp", layout.pp()});
    out.coords.push_back(layout.pp_index(rank));
  }
  out.mesh.push_back({fsdp > 1 ? "replica" : "dp", layout.dp() / fsdp});
  out.mesh.push_back({"cp", layout.cp()});
  out.coords.push_back(dp_index / fsdp);
  out.coords.push_back(layout.cp_index(rank));
  if (layout.tp() > 1) {
    out.mesh.push_back({"tp", layout.tp()});
    out.coords.push_back(layout.tp_index(rank));
  }
  if (fsdp > 1) {
    out.mesh.push_back({"fsdp", fsdp});
    out.coords.push_back(dp_index % fsdp);
  }
  return out;
}

namespace {

// How the tp ranks' pieces of a parameter split by `split` make the whole (`rows`: its dim 0).
Placement tensor_parallel_placement(TensorSplit split, int64_t rows) {
  switch (split) {
    case TensorSplit::kReplicated:
      return Placement::replicate();
    case TensorSplit::kColumnwise:
      return Placement::shard(0);
    case TensorSplit::kColumnwiseQkv:
      return Placement::shard(0, 0, 3);
    case TensorSplit::kRowwise:
      return Placement::shard(1);
    case TensorSplit::kVocabulary:
      return Placement::shard(0, rows);
  }
  return Placement::replicate();
}

}  // namespace

TraceLayout mesh_trace_layout(const MeshLayout& layout, int rank, Convention convention, const ParallelPlan& plan,
                              const std::map<std::string, int64_t>& whole_rows, bool sequence_parallel,
                              const std::map<std::string, std::vector<int64_t>>& stages_holding) {
  TraceLayout out = trace_mesh(layout, rank);
  const auto reduce = convention == Convention::kSum ? Placement::Reduce::kSum : Placement::Reduce::kAvg;
  size_t tp_dim = out.mesh.size(), pp_dim = out.mesh.size();
  for (size_t m = 0; m < out.mesh.size(); ++m) {
    const std::string& name = out.mesh[m].name;
    if (name == "pp") {
      // A stage records the activations and the loss of its own chunks only; REPLAY's dQ/dw is
      // each stage's term (the loss's weights act on the last stage alone).
      pp_dim = m;
      const Placement mine = Placement::replicate().held_on({out.coords[m]});
      out.rows_and_columns.push_back(mine);
      out.loss.push_back(mine);
      out.weight_gradient.push_back(Placement::partial(Placement::Reduce::kSum));
      out.parameters.push_back(Placement::replicate());
      continue;
    }
    if (name == "tp") {
      // Every tp rank holds the same rows, columns and loss; its parameters are pieces by the plan.
      tp_dim = m;
      for (auto* placements : {&out.rows_and_columns, &out.loss, &out.parameters, &out.weight_gradient}) {
        placements->push_back(Placement::replicate());
      }
      continue;
    }
    const bool splits_rows = name != "cp";  // dp, replica, fsdp: the dp index
    // sp pads the sequence even with cp = 1: a zig-zag over one rank (chunks 0, 1) cuts the padding.
    const bool padded = layout.cp() > 1 || sequence_parallel;
    out.rows_and_columns.push_back(splits_rows ? Placement::shard(0)
                                   : padded    ? Placement::zigzag(1)
                                               : Placement::replicate());
    out.loss.push_back(Placement::partial(reduce));
    out.weight_gradient.push_back(Placement::partial(Placement::Reduce::kSum));
    out.parameters.push_back(name == "fsdp" ? Placement::shard(0) : Placement::replicate());
  }
  if (tp_dim < out.mesh.size() && sequence_parallel) {
    // sp: between blocks each tp rank holds a contiguous shard of its rank's columns.
    out.residual_stream = out.rows_and_columns;
    out.residual_stream[tp_dim] = Placement::shard(1);
  }
  if (tp_dim < out.mesh.size()) {
    for (const auto& [name, rows] : whole_rows) {
      const TensorSplit split = split_of(plan, name);
      if (split == TensorSplit::kReplicated) continue;
      out.parameters_by_name[name] = out.parameters;
      out.parameters_by_name[name][tp_dim] = tensor_parallel_placement(split, rows);
      // The logits [rows, columns, vocabulary] are split as the vocabulary is, its padding cut.
      if (split == TensorSplit::kVocabulary) {
        out.rows_columns_and_vocabulary = out.rows_and_columns;
        out.rows_columns_and_vocabulary[tp_dim] = Placement::shard(2, rows);
      }
    }
  }
  // Each parameter on the stages that hold it (a tied embedding on the first and the last).
  for (const auto& [name, stages] : stages_holding) {
    if (pp_dim == out.mesh.size()) break;
    out.parameters_by_name.emplace(name, out.parameters).first->second[pp_dim] = Placement::replicate().held_on(stages);
  }
  // The gradient leaves backward reduced already (enter()'s collectives); under AVG it is the sum
  // of local means, which only the convention's divide makes the whole gradient.
  out.backward_gradient_is_whole = convention == Convention::kSum;
  return out;
}

MeshParts mesh_parts(const MeshGroups& groups, const TensorTree& full_params, const ParallelPlan& plan,
                     bool sequence_parallel, StageParts stage, bool ring) {
  MeshParts parts;
  parts.stage = std::move(stage);
  parts.groups = groups;
  const int64_t tp = groups.layout.tp();
  parts.context = std::make_shared<ContextParallel>(groups.cp, sequence_parallel ? tp : 1, ring);
  if (tp > 1) {
    parts.tensor = std::make_shared<TensorParallelGroup>(groups.tp, sequence_parallel);
  } else {
    parts.tensor = std::make_shared<SingleRank>();
  }
  parts.sequence_parallel = sequence_parallel;
  parts.plan = plan;
  parts.parameters = std::make_shared<ShardedParameters>(groups.shard, groups.replica);
  if (sequence_parallel) parts.summed_over_tp = std::make_shared<ShardedParameters>(groups.shard, groups.replica_tp);
  for (const auto& p : full_params) {
    parts.names.push_back(p.name);
    parts.whole_shapes[p.name] = p.tensor.sizes().vec();
    parts.whole_rows[p.name] = p.tensor.size(0);
    parts.full_rows[p.name] = tensor_parallel_piece(p.tensor, split_of(plan, p.name), tp, 0).size(0);
  }
  return parts;
}

DataParallel::DataParallel(MeshParts parts, Convention convention)
    : parts_(std::move(parts)), convention_(convention) {}

std::vector<int64_t> DataParallel::local_share(const std::vector<int64_t>& global) const {
  auto [begin, end] = shard_range(static_cast<int64_t>(global.size()), static_cast<int>(layout().dp_index(rank())),
                                  static_cast<int>(layout().dp()));
  return std::vector<int64_t>(global.begin() + begin, global.begin() + end);
}

double DataParallel::mean_denominator(double local_valid_labels) const {
  // A local mean over an empty shard is taken as 0 (its sum is 0), not 0/0.
  if (convention_ == Convention::kAvg) return std::max(local_valid_labels, 1.0);
  return sum_over_batch(at::scalar_tensor(local_valid_labels, at::kDouble)).item<double>();
}

bool DataParallel::split_over_tp(const std::string& name) const {
  return layout().tp() > 1 && split_of(parts_.plan, name) != TensorSplit::kReplicated;
}

at::Tensor DataParallel::sum_over_batch(const at::Tensor& local) const {
  return parts_.groups.batch ? parts_.groups.batch->sum(local) : local.detach().clone();
}

at::Tensor DataParallel::sum_over_batch_and_stages(const at::Tensor& local) const {
  const at::Tensor batch = sum_over_batch(local);
  return parts_.groups.pp ? parts_.groups.pp->sum(batch) : batch;
}

bool DataParallel::tied_copy(const std::string& name) const {
  return pipelined() && name == parts_.stage.tied && layout().pp_index(rank()) == layout().pp() - 1;
}

ModelLayout DataParallel::model_layout(int64_t length) const {
  ModelLayout out{parts_.context->layout(length), parts_.tensor, {}, {}};
  if (parts_.sequence_parallel) {
    // The residual stream's columns on this tp rank: a contiguous 1/tp of the rank's columns (the
    // context layout pads them to a multiple of tp), gathered back in tp-rank order.
    const int64_t n = out.sequence.position_ids.size(0) / layout().tp();
    out.residual_position_ids = out.sequence.position_ids.narrow(0, layout().tp_index(rank()) * n, n);
  }
  return out;
}

TensorTree DataParallel::shard(const TensorTree& full) const {
  const int64_t tp = layout().tp(), index = layout().tp_index(rank());
  TensorTree stage;  // a pipeline stage holds its chunks' parameters only
  for (const auto& [name, p] : full) {
    const auto& held = parts_.stage.held;
    if (!pipelined() || std::find(held.begin(), held.end(), name) != held.end()) stage.insert(name, p);
  }
  return parts_.parameters->shard(stage.map_named([&](const std::string& name, const at::Tensor& p) {
    return tp > 1 ? tensor_parallel_piece(p, split_of(parts_.plan, name), tp, index) : p;
  }));
}

TensorTree DataParallel::unshard(const TensorTree& local) const {
  const TensorTree pieces = parts_.parameters->unshard(local, parts_.full_rows);
  const TensorTree stage =
      layout().tp() == 1 ? pieces : pieces.map_named([&](const std::string& name, const at::Tensor& piece) {
        if (!split_over_tp(name)) return piece;
        const at::Tensor all = parts_.groups.tp->all_gather(piece.unsqueeze(0).contiguous(), 0);
        return join_tensor_parallel_pieces(all.unbind(0), split_of(parts_.plan, name), parts_.whole_rows.at(name));
      });
  if (!pipelined()) return stage;
  // Every parameter from the first stage that holds it (a tied embedding: the first stage's copy).
  TensorTree whole;
  const auto options = local.begin()->tensor.options();
  for (const std::string& name : parts_.names) {
    const int64_t owner = parts_.stage.owner.at(name);
    at::Tensor p = owner == layout().pp_index(rank()) ? stage.at(name).contiguous().clone()
                                                      : at::zeros(parts_.whole_shapes.at(name), options);
    parts_.groups.pp->broadcast_(p, static_cast<int>(owner));
    whole.insert(name, p);
  }
  return whole;
}

TensorTree DataParallel::enter(const TensorTree& params) const {
  const TensorTree entered = enter_stage(params);
  const std::string& tied = parts_.stage.tied;
  if (tied.empty() || !parts_.groups.embedding || !entered.contains(tied)) return entered;
  // The tied embedding's two copies: their gradients are summed over the embedding group in this
  // backward, before the shard group's reduce-scatter above it.
  return entered.map_named([&](const std::string& name, const at::Tensor& p) {
    return name == tied ? copy_to_group(p, *parts_.groups.embedding) : p;
  });
}

TensorTree DataParallel::enter_stage(const TensorTree& params) const {
  if (!parts_.summed_over_tp) return parts_.parameters->gather(params, parts_.full_rows);
  // Under sp the replicated parameters' gradients are partial on each tp rank: they enter
  // through their own bucket, whose backward sums over tp as well.
  TensorTree pieces, replicated;
  for (const auto& [name, p] : params) (split_over_tp(name) ? pieces : replicated).insert(name, p);
  const TensorTree a = parts_.parameters->gather(pieces, parts_.full_rows);
  const TensorTree b = parts_.summed_over_tp->gather(replicated, parts_.full_rows);
  TensorTree entered;
  for (const auto& e : params) entered.insert(e.name, a.contains(e.name) ? a.at(e.name) : b.at(e.name));
  return entered;
}

at::Tensor DataParallel::global_squares(const TensorTree& grads) const {
  if (!pipelined()) return stage_squares(grads);
  // Σ over the stages; a tied embedding's last-stage copy adds a zero whose derivative is its
  // terms', so that the norm's cotangent reaches the copy's local part of the summed gradient.
  TensorTree own, copy;
  for (const auto& [name, g] : grads) (tied_copy(name) ? copy : own).insert(name, g);
  at::Tensor squares = stage_squares(own);
  if (!copy.empty()) {
    const at::Tensor of_copy = stage_squares(copy);
    squares = squares + (of_copy - of_copy.detach());
  }
  return reduce_from_group(squares, *parts_.groups.pp);
}

at::Tensor DataParallel::stage_squares(const TensorTree& grads) const {
  const ShardedParameters& shards = *parts_.parameters;
  if (layout().tp() == 1) return shards.sum_squares(dot(grads, grads));
  // ||g||² = Σ_fsdp (Σ_replicated g² + Σ_tp Σ_pieces g²): a replicated parameter counts once, as
  // every tp rank holds all of it.
  TensorTree pieces, replicated;
  for (const auto& [name, g] : grads) (split_over_tp(name) ? pieces : replicated).insert(name, g);
  at::Tensor squares = reduce_from_group(dot(pieces, pieces), *parts_.groups.tp);
  if (!replicated.empty()) squares = squares + dot(replicated, replicated);
  return shards.sum_squares(squares);
}

TensorTree DataParallel::apply_clip(const TensorTree& grads, const at::Tensor& coefficient) const {
  if (!pipelined()) return clip_stage(grads, coefficient);
  // c scales different parameters on each stage (copy_to_group: its derivative sums theirs); the
  // last stage's copy of a tied embedding takes it detached, as its term is the first stage's.
  TensorTree own, copy;
  for (const auto& [name, g] : grads) (tied_copy(name) ? copy : own).insert(name, g);
  const TensorTree clipped = clip_stage(own, copy_to_group(coefficient, *parts_.groups.pp));
  const TensorTree clipped_copy = copy.empty() ? TensorTree() : clip_stage(copy, coefficient.detach());
  return grads.map_named([&](const std::string& name, const at::Tensor&) {
    return clipped.contains(name) ? clipped.at(name) : clipped_copy.at(name);
  });
}

TensorTree DataParallel::clip_stage(const TensorTree& grads, const at::Tensor& coefficient) const {
  // c scales different shards on each rank of the shard group, and different pieces on each tp
  // rank: it enters them through copy_to_group, so that its derivative sums the ranks' terms
  // (the replicated parameters' share counted once over tp).
  const at::Tensor sharded = parts_.parameters->enter_coefficient(coefficient);
  if (layout().tp() == 1) return scale_by(grads, sharded);
  const at::Tensor pieces = copy_to_group(sharded, *parts_.groups.tp);
  return grads.map_named(
      [&](const std::string& name, const at::Tensor& g) { return g * (split_over_tp(name) ? pieces : sharded); });
}

TensorTree DataParallel::reduce_gradient(const TensorTree& grads) const {
  return grads;  // already reduced by enter()'s backward
}

TensorTree DataParallel::apply_convention(const TensorTree& grads) const {
  if (convention_ != Convention::kAvg) return grads;
  return scale(grads, 1.0 / static_cast<double>(layout().dp() * layout().cp()));
}

ReductionGroupSums DataParallel::sum_over_reduction_groups(const TensorTree& local) const {
  // enter()'s backward sums a parameter's gradient over the shard and replica groups (the batch
  // group), or, for one summed over tp under sp, shard and replica_tp (batch x tp: the world, or
  // the stage's with pp); a tied embedding's over the embedding group as well.
  ReductionGroupSums out;
  for (const auto& [name, x] : local) {
    const bool over_tp = parts_.summed_over_tp && !split_over_tp(name);
    const Group* group = over_tp && !pipelined() ? parts_.groups.world.get() : parts_.groups.batch.get();
    out.ranks[name] = group != nullptr ? group->size() : 1;
    at::Tensor sum = group != nullptr ? group->sum(x.detach()) : x.detach().clone();
    if (over_tp && pipelined()) {
      sum = parts_.groups.tp->sum(sum);
      out.ranks[name] *= layout().tp();
    }
    if (name == parts_.stage.tied && parts_.groups.embedding) {
      sum = parts_.groups.embedding->sum(sum);
      out.ranks[name] *= parts_.groups.embedding->size();
    }
    if (!split_over_tp(name)) {
      out.whole.insert(name, sum);
      continue;
    }
    const at::Tensor all = parts_.groups.tp->all_gather(sum.unsqueeze(0).contiguous(), 0);
    out.whole.insert(
        name, join_tensor_parallel_pieces(all.unbind(0), split_of(parts_.plan, name), parts_.whole_rows.at(name)));
  }
  if (!pipelined()) return out;
  // Every parameter's sums from the first stage that holds it; `local`'s trailing dimensions
  // beyond a parameter's (the probe stacks its sums and magnitudes) come along.
  const at::Tensor& first = local.begin()->tensor;
  const std::vector<int64_t> trailing(
      first.sizes().begin() + static_cast<int64_t>(parts_.whole_shapes.at(local.begin()->name).size()),
      first.sizes().end());
  ReductionGroupSums whole;
  for (const std::string& name : parts_.names) {
    const int64_t owner = parts_.stage.owner.at(name);
    const bool mine = owner == layout().pp_index(rank());
    std::vector<int64_t> shape = parts_.whole_shapes.at(name);
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    at::Tensor sums = mine ? out.whole.at(name).contiguous().clone() : at::zeros(shape, first.options());
    at::Tensor ranks = at::full({1}, mine ? static_cast<double>(out.ranks.at(name)) : 0.0, at::kDouble);
    parts_.groups.pp->broadcast_(sums, static_cast<int>(owner));
    parts_.groups.pp->broadcast_(ranks, static_cast<int>(owner));
    whole.whole.insert(name, sums);
    whole.ranks[name] = static_cast<int64_t>(ranks.item<double>());
  }
  return whole;
}

at::Tensor DataParallel::sum_across_ranks(const at::Tensor& local) const {
  return sum_over_batch_and_stages(local);
}

MicroBatchGradients DataParallel::micro_batch_gradients(const TensorTree& params, const MicroBatchPass& pass,
                                                        bool create_graph) const {
  if (!pipelined()) return Parallelism::micro_batch_gradients(params, pass, create_graph);
  return pipeline_micro_batch_gradients(parts_.stage.run, parts_.stage.chunks, params, pass, create_graph);
}

std::vector<at::Tensor> DataParallel::micro_batch_losses(const TensorTree& params, const MicroBatchPass& pass) const {
  if (!pipelined()) return Parallelism::micro_batch_losses(params, pass);
  return pipeline_micro_batch_losses(parts_.stage.run, parts_.stage.chunks, params, pass);
}

TraceLayout DataParallel::trace_layout() const {
  std::map<std::string, std::vector<int64_t>> stages_holding;
  for (const auto& [name, owner] : parts_.stage.owner) {
    stages_holding[name] =
        name == parts_.stage.tied ? std::vector<int64_t>{0, layout().pp() - 1} : std::vector<int64_t>{owner};
  }
  return mesh_trace_layout(layout(), rank(), convention_, parts_.plan, parts_.whole_rows, parts_.sequence_parallel,
                           stages_holding);
}

at::Tensor DataParallel::assemble_weight_gradient(const at::Tensor& local) const {
  // The tp ranks' dQ/dw agree: w weighs the loss every tp rank holds whole, and the collectives'
  // backward brings every rank's share of λ·∂g/∂w to each.
  return sum_over_batch_and_stages(local);
}

}  // namespace magic::dist
