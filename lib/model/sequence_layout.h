// SequenceLayout: which columns of a batch a forward pass computes and how its attention
// reaches the keys of the columns it does not hold (context parallelism: docs/magic-check.md,
// "Context parallel (`cp`)").
// The single-process layout is the whole sequence in order; a context-parallel rank holds two
// zig-zag chunks of a sequence padded to a multiple of 2·cp (lib/distributed/parallel/context_parallel.h).
// Padding columns carry no label and weight 0; their positions come after every real one, so no
// real query attends to them.
#pragma once

#include <ATen/ATen.h>

#include <functional>

namespace magic {

struct SequenceLayout {
  int64_t padded_length = 0;  // the batch is padded to this many columns
  at::Tensor columns;         // [T_local] int64: the columns this forward computes
  at::Tensor positions;       // [T_local] int64: their true positions (the causal mask)
  at::Tensor position_ids;    // [T_local] int64: the positions embedded (the true ones, but see cp-local-positions)
  at::Tensor key_positions;   // [T_keys] int64: true positions of the keys gather_keys returns
  // [B, H, T_local, D] -> [B, H, T_keys, D]: this rank's keys or values -> every rank's.
  std::function<at::Tensor(const at::Tensor&)> gather_keys;
  // Set by a layout whose attention does not gather the keys (ring attention): softmax(q kᵀ +
  // causal mask) v for this rank's queries q (scaled already), keys and values [B, H, T_local, D].
  std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)> attend;
  // The keys are these columns themselves, positions 0 .. T-1 in order (whole): attention then
  // skips the blocks above the diagonal (lib/model/gpt.cpp).
  bool keys_in_order = false;

  // The same layout with its index tensors on `device` (gather_keys moves what it is given).
  SequenceLayout to(const at::Device& device) const;

  // The whole sequence of `length` columns, in order, on one process.
  static SequenceLayout whole(int64_t length);
};

}  // namespace magic
