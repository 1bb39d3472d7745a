#include "lib/distributed/parallel/sharded_parameters.h"

#include <algorithm>
#include <functional>

#include "lib/core/strings.h"
#include "lib/distributed/collectives/collectives.h"

namespace magic::dist {

std::pair<int64_t, int64_t> chunk_range(int64_t rows, int64_t index, int64_t count) {
  const int64_t chunk = (rows + count - 1) / count;
  const int64_t begin = std::min(rows, index * chunk);
  return {begin, std::min(rows, begin + chunk)};
}

ShardedParameters::ShardedParameters(std::shared_ptr<const Group> shard, std::shared_ptr<const Group> replica)
    : shard_(std::move(shard)), replica_(std::move(replica)) {}

TensorTree ShardedParameters::shard(const TensorTree& full) const {
  return full.map([this](const at::Tensor& p) {
    if (shards() == 1) return p.clone();
    auto [begin, end] = chunk_range(p.size(0), shard_->rank(), shards());
    return p.narrow(0, begin, end - begin).clone();
  });
}

namespace {

int64_t rows_of(const std::map<std::string, int64_t>& full_rows, const std::string& name) {
  const auto it = full_rows.find(name);
  if (it == full_rows.end()) throw std::logic_error(str_cat("sharded parameters: no full shape for '", name, "'"));
  return it->second;
}

bool one_dtype(const TensorTree& tree) {
  return std::all_of(tree.begin(), tree.end(), [&](const TensorTree::Entry& e) {
    return e.tensor.scalar_type() == tree.begin()->tensor.scalar_type();
  });
}

at::Tensor padded(const at::Tensor& shard, int64_t rows) {
  if (shard.size(0) == rows) return shard;
  std::vector<int64_t> pad(2 * shard.dim(), 0);
  pad.back() = rows - shard.size(0);  // constant_pad_nd pads the last dimension first
  return at::constant_pad_nd(shard, pad, 0);
}

}  // namespace

TensorTree ShardedParameters::unshard(const TensorTree& local, const std::map<std::string, int64_t>& full_rows) const {
  if (shards() == 1) return local.detach();
  return gathered_bucket(local.detach(), full_rows,
                         [this](const at::Tensor& padded_flat) { return shard_->all_gather(padded_flat, 0); });
}

TensorTree ShardedParameters::gather(const TensorTree& local, const std::map<std::string, int64_t>& full_rows) const {
  if (!replica_ && shards() == 1) return local;
  if (!one_dtype(local)) throw std::logic_error("sharded parameters: the parameters do not share one dtype");
  // One bucket for the whole tree, as DDP and FSDP do: one collective per reduction (and per
  // order of derivative) instead of one per parameter. cat and narrow are differentiable at
  // every order, so the bucket changes no derivative, only how many messages carry it.
  const TensorTree entered = local.unflatten(enter_replicas(local.flatten()));
  if (shards() == 1) return entered;
  return gathered_bucket(entered, full_rows,
                         [this](const at::Tensor& padded_flat) { return all_gather_padded(padded_flat); });
}

TensorTree ShardedParameters::gathered_bucket(
    const TensorTree& shards_tree, const std::map<std::string, int64_t>& full_rows,
    const std::function<at::Tensor(const at::Tensor&)>& all_gather_flat) const {
  if (!one_dtype(shards_tree)) throw std::logic_error("sharded parameters: the tensors do not share one dtype");
  const TensorTree padded_shards = shards_tree.map_named(
      [&](const std::string& name, const at::Tensor& s) { return padded(s, chunk_rows(rows_of(full_rows, name))); });
  const at::Tensor gathered = all_gather_flat(padded_shards.flatten()).view({shards(), -1});
  TensorTree full;
  int64_t offset = 0;
  for (const auto& [name, shard] : padded_shards) {
    // Every rank's padded shard of this parameter, stacked: [shards * chunk, rest...], cut to n rows.
    std::vector<int64_t> shape = shard.sizes().vec();
    shape[0] *= shards();
    full.insert(name, gathered.narrow(1, offset, shard.numel()).reshape(shape).narrow(0, 0, rows_of(full_rows, name)));
    offset += shard.numel();
  }
  return full;
}

at::Tensor ShardedParameters::sum_squares(const at::Tensor& squares) const {
  return shards() == 1 ? squares : reduce_from_group(squares, *shard_);
}

at::Tensor ShardedParameters::enter_coefficient(const at::Tensor& coefficient) const {
  return shards() == 1 ? coefficient : copy_to_group(coefficient, *shard_);
}

at::Tensor ShardedParameters::enter_replicas(const at::Tensor& shard) const {
  return replica_ ? copy_to_group(shard, *replica_) : shard;
}

int64_t ShardedParameters::chunk_rows(int64_t full_rows) const {
  return (full_rows + shards() - 1) / shards();
}

at::Tensor ShardedParameters::all_gather_padded(const at::Tensor& padded_shard) const {
  return all_gather(padded_shard, *shard_, 0);
}

}  // namespace magic::dist
