#include "lib/distributed/parallel/context_parallel.h"

#include "lib/distributed/collectives/collectives.h"

namespace magic::dist {

int64_t cp_padded_length(int64_t length, int64_t cp, int64_t shards) {
  const int64_t chunks = 2 * cp * shards;
  return (length + chunks - 1) / chunks * chunks;
}

at::Tensor zigzag_columns(int64_t padded_length, int64_t cp, int64_t rank) {
  const int64_t chunk = padded_length / (2 * cp);
  return at::cat({at::arange(rank * chunk, (rank + 1) * chunk, at::kLong),
                  at::arange((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk, at::kLong)});
}

ContextParallel::ContextParallel(std::shared_ptr<const Group> group, int64_t sequence_shards, bool ring)
    : group_(std::move(group)), sequence_shards_(sequence_shards), ring_(ring) {}

SequenceLayout ContextParallel::layout(int64_t length) const {
  if (size() == 1) {
    const int64_t padded = sequence_shards_ == 1 ? length : cp_padded_length(length, 1, sequence_shards_);
    SequenceLayout whole = SequenceLayout::whole(padded);
    return whole;
  }
  SequenceLayout layout;
  layout.padded_length = cp_padded_length(length, size(), sequence_shards_);
  layout.columns = columns(layout.padded_length);
  layout.positions = positions(layout.padded_length);
  layout.position_ids = position_ids(layout.padded_length);
  std::vector<at::Tensor> keys;
  for (int64_t r = 0; r < size(); ++r) keys.push_back(zigzag_columns(layout.padded_length, size(), r));
  layout.key_positions = at::cat(keys);
  const int64_t key_count = layout.key_positions.size(0);
  layout.gather_keys = [this, key_count](const at::Tensor& kv) {
    // Every rank of a cp group holds the same rows, so an empty batch is empty on all of them.
    if (kv.size(0) == 0) return kv.new_zeros({0, kv.size(1), key_count, kv.size(3)});
    return gather_keys(kv);
  };
  if (ring_) {
    const at::Tensor positions = layout.positions;
    layout.attend = [this, positions](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      if (q.size(0) == 0) return q.clone();  // an empty batch is empty on every rank of the ring
      const at::Tensor at = positions.to(q.device());
      return ring_attention(q, k, v, at, at, group_.get(), ring_steps());
    };
  }
  return layout;
}

at::Tensor ContextParallel::columns(int64_t padded_length) const {
  return zigzag_columns(padded_length, size(), group_->rank());
}

at::Tensor ContextParallel::positions(int64_t padded_length) const {
  return zigzag_columns(padded_length, size(), group_->rank());
}

at::Tensor ContextParallel::position_ids(int64_t padded_length) const {
  return positions(padded_length);
}

at::Tensor ContextParallel::gather_keys(const at::Tensor& kv) const {
  return all_gather(kv.contiguous(), *group_, 2);
}

}  // namespace magic::dist
