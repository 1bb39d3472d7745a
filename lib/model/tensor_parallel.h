// How a forward pass is split across tensor-parallel ranks (docs/magic-check.md, "Tensor
// parallel (`tp`)"), as Megatron-core's mappings: the model calls these where a column-parallel
// linear begins and a row-parallel one ends (activations are [B, T, ...]: the sequence is dim 1),
// and the vocabulary-parallel loss calls its reductions.
// A single process, and every rank of a mesh without tp, uses SingleRank (identities), so the
// model's single-process arithmetic is unchanged. lib/distributed/parallel/tensor_parallel_group.h
// implements the mesh's, from the differentiable collectives (every derivative order).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace magic {

class TensorParallel {
 public:
  virtual ~TensorParallel() = default;
  virtual int64_t size() const = 0;
  virtual int64_t index() const = 0;
  // Before a column-parallel linear: identity forward, Σ over tp backward (copy_to_group). With
  // sequence parallelism the all-gather of the sequence shards along `sequence_dim` instead.
  virtual at::Tensor enter_column(const at::Tensor& x, int64_t sequence_dim) const = 0;
  // After a row-parallel linear (and the vocabulary-parallel embedding), whose outputs are partial
  // sums: Σ over tp forward, identity backward (reduce_from_group). With sequence parallelism the
  // reduce-scatter into sequence shards along `sequence_dim` instead.
  virtual at::Tensor leave_row(const at::Tensor& partial, int64_t sequence_dim) const = 0;
  // A replicated value from partial sums, consumed identically on every rank (the loss's Σexp and
  // target logit): Σ forward, identity backward, whatever the sequence layout.
  virtual at::Tensor sum_replicated(const at::Tensor& partial) const = 0;
  // The elementwise max over ranks, outside autograd (a softmax's shift: any constant is exact).
  virtual at::Tensor max(const at::Tensor& x) const = 0;

  // Megatron's two linears, here so that a planted bug can replace one. Column-parallel: this
  // rank's output features of enter_column(x)·Wᵀ + b. Row-parallel: leave_row(x·Wᵀ) + b, the
  // bias added once after the sum (on one rank: the plain linear).
  virtual at::Tensor column_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const;
  virtual at::Tensor row_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const;

  // The vocabulary-parallel loss's three reductions (vocab_parallel_loss.h), each its own method
  // so that a planted bug can replace one: the softmax's shift, Σexp, and the target's logit (and,
  // with label smoothing, the logits' sum, reduced like the target's).
  virtual at::Tensor loss_shift(const at::Tensor& local_max) const { return max(local_max); }
  virtual at::Tensor loss_sum_exp(const at::Tensor& partial) const { return sum_replicated(partial); }
  virtual at::Tensor loss_target_logit(const at::Tensor& partial) const { return sum_replicated(partial); }
  virtual at::Tensor loss_logit_sum(const at::Tensor& partial) const { return sum_replicated(partial); }
};

// One rank holds everything: identities.
class SingleRank : public TensorParallel {
 public:
  int64_t size() const override { return 1; }
  int64_t index() const override { return 0; }
  at::Tensor enter_column(const at::Tensor& x, int64_t) const override { return x; }
  at::Tensor leave_row(const at::Tensor& partial, int64_t) const override { return partial; }
  at::Tensor sum_replicated(const at::Tensor& partial) const override { return partial; }
  at::Tensor max(const at::Tensor& x) const override { return x.detach(); }
};

// The vocabulary rows a tensor-parallel rank holds of an embedding or LM head: Megatron pads the
// vocabulary V to a multiple of tp and gives each rank `local` consecutive rows from `begin`;
// `real` of them are tokens (the rest padding that no token embeds and no softmax sees).
//   padded = ceil(V / tp)·tp,  local = padded / tp,  begin = index·local,  real = clamp(V − begin, 0, local)
struct VocabShard {
  int64_t begin = 0, local = 0, real = 0, vocabulary = 0;
};
VocabShard vocab_shard(int64_t vocabulary, int64_t tp, int64_t index);

}  // namespace magic
