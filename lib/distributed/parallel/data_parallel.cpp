#include "lib/distributed/parallel/data_parallel.h"

#include <algorithm>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/collectives/collectives.h"

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

TraceLayout mesh_trace_layout(const MeshLayout& layout, int rank, Convention convention) {
  TraceLayout out;
  const int64_t dp_index = layout.dp_index(rank);
  std::vector<Placement> dp_parameters;  // over the mesh dimensions that split the dp index
  if (layout.fsdp() > 1) {
    out.mesh = {{"replica", layout.dp() / layout.fsdp()}, {"fsdp", layout.fsdp()}};
    out.coords = {dp_index / layout.fsdp(), dp_index % layout.fsdp()};
    dp_parameters = {Placement::replicate(), Placement::shard(0)};
  } else {
    out.mesh = {{"dp", layout.dp()}};
    out.coords = {dp_index};
    dp_parameters = {Placement::replicate()};
  }
  out.rows_and_columns.assign(out.mesh.size(), Placement::shard(0));
  out.parameters = dp_parameters;
  out.mesh.push_back({"cp", layout.cp()});
  out.coords.push_back(layout.cp_index(rank));
  out.rows_and_columns.push_back(layout.cp() > 1 ? Placement::zigzag(1) : Placement::replicate());
  out.parameters.push_back(Placement::replicate());
  const auto reduce = convention == Convention::kSum ? Placement::Reduce::kSum : Placement::Reduce::kAvg;
  out.loss.assign(out.mesh.size(), Placement::partial(reduce));
  // The gradient leaves backward reduced already (enter()'s collectives); under AVG it is the sum
  // of local means, which only the convention's divide makes the whole gradient.
  if (convention == Convention::kSum) out.backward_gradient = out.parameters;
  out.weight_gradient.assign(out.mesh.size(), Placement::partial(Placement::Reduce::kSum));
  return out;
}

MeshParts mesh_parts(const MeshGroups& groups, const TensorTree& full_params) {
  MeshParts parts;
  parts.groups = groups;
  parts.context = std::make_shared<ContextParallel>(groups.cp);
  parts.parameters = std::make_shared<ShardedParameters>(groups.shard, groups.replica);
  for (const auto& p : full_params) parts.full_rows[p.name] = p.tensor.size(0);
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
  return world().sum(at::scalar_tensor(local_valid_labels, at::kDouble)).item<double>();
}

SequenceLayout DataParallel::sequence(int64_t length) const {
  return parts_.context->layout(length);
}

TensorTree DataParallel::shard(const TensorTree& full) const {
  return parts_.parameters->shard(full);
}

TensorTree DataParallel::unshard(const TensorTree& local) const {
  return parts_.parameters->unshard(local, parts_.full_rows);
}

TensorTree DataParallel::enter(const TensorTree& params) const {
  return parts_.parameters->gather(params, parts_.full_rows);
}

at::Tensor DataParallel::global_norm(const TensorTree& grads) const {
  return parts_.parameters->global_norm(grads);
}

TensorTree DataParallel::reduce_gradient(const TensorTree& grads) const {
  return grads;  // already reduced by enter()'s backward
}

TensorTree DataParallel::apply_convention(const TensorTree& grads) const {
  if (convention_ != Convention::kAvg) return grads;
  return scale(grads, 1.0 / world().size());
}

at::Tensor DataParallel::sum_across_ranks(const at::Tensor& local) const {
  return world().sum(local);
}

TraceLayout DataParallel::trace_layout() const {
  return mesh_trace_layout(layout(), rank(), convention_);
}

at::Tensor DataParallel::assemble_weight_gradient(const at::Tensor& local) const {
  return sum_across_ranks(local);
}

}  // namespace magic::dist
