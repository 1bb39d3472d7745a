// Context parallelism (docs/magic-check.md, "Context parallel (`cp`)"): the ranks of a cp group
// split every sequence.
// The sequence, padded to P = 2·cp·s·ceil(T / 2cp·s) columns (padding: no label, weight 0; s the
// sequence-parallel shards of each rank's columns, 1 without sp), is cut into 2·cp chunks of
// P / 2cp; cp rank r holds chunks r and 2cp-1-r, which balances the causal mask's work (zig-zag).
// With cp = 1 and s > 1 the whole padded sequence is the rank's. Attention reaches the other ranks' keys and values
// through the differentiable all_gather over the cp group (backward reduce_scatter_sum), so every order of derivative
// crosses cp ranks; the mask compares true positions. With `ring` (cp_impl=ring) the keys and values travel the
// ring instead, the softmax combined online (ring_attention.h). checks/planted_variants.cpp derives the cp mutations
// from this class.
#pragma once

#include <memory>

#include "lib/distributed/parallel/ring_attention.h"
#include "lib/distributed/runtime/group.h"
#include "lib/model/sequence_layout.h"

namespace magic::dist {

// P for a sequence of `length` over `cp` ranks, each splitting its columns `shards` ways.
int64_t cp_padded_length(int64_t length, int64_t cp, int64_t shards = 1);
// The columns of rank `rank` of `cp`: chunks rank and 2cp-1-rank of a padded length P, in order.
at::Tensor zigzag_columns(int64_t padded_length, int64_t cp, int64_t rank);

class ContextParallel {
 public:
  // `group`: this rank's cp group (nullptr: cp = 1, the whole sequence on this rank);
  // `sequence_shards`: how many ways sequence parallelism splits this rank's columns.
  // `ring`: ring attention (ring_attention.h) instead of gathering the keys and values.
  explicit ContextParallel(std::shared_ptr<const Group> group, int64_t sequence_shards = 1, bool ring = false);
  virtual ~ContextParallel() = default;

  int64_t size() const { return group_ ? group_->size() : 1; }
  int64_t sequence_shards() const { return sequence_shards_; }
  bool ring() const { return ring_; }
  const Group& group() const { return *group_; }

  // This rank's layout of a sequence of `length` columns.
  SequenceLayout layout(int64_t length) const;

 protected:
  // The columns this rank computes; their true positions; the positions it embeds.
  virtual at::Tensor columns(int64_t padded_length) const;
  virtual at::Tensor positions(int64_t padded_length) const;
  virtual at::Tensor position_ids(int64_t padded_length) const;
  // [B, H, T_local, D] -> [B, H, T_keys, D], every cp rank's keys in cp-rank order.
  virtual at::Tensor gather_keys(const at::Tensor& kv) const;
  // The ring's steps (ring attention): shift_ring and block_product, or planted variants.
  virtual RingSteps ring_steps() const { return {}; }

 private:
  std::shared_ptr<const Group> group_;
  int64_t sequence_shards_;
  bool ring_;
};

}  // namespace magic::dist
