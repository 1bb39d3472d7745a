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

at::Tensor DataParallel::assemble_weight_gradient(const at::Tensor& local) const {
  return sum_across_ranks(local);
}

}  // namespace magic::dist
