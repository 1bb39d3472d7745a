// Bridge: the encoder's outputs to the language model's prefix embeddings, across the two layouts
// of bridge_layout.h (docs/magic-check.md, "Encoder and language model: the bridge"). Each step is
// a conjugate pair of collectives.h, so REPLAY's and the HVP's higher derivatives cross it too:
//   fan        fan-in: gather_from_group over the bridge group (backward: this shard's rows);
//              fan-out: split_to_group over it (backward: gather the lm shards' rows); equal: none
//   cp         copy_to_group over the lm cp group (backward: the intra-cp sum)
//   columns    index_select of this cp rank's prefix columns (backward: a zero-padded scatter)
// In backward order each cp rank's gradient covers its own columns only, so the intra-cp sum
// must come before the fan step's adjoint; without it a shard's gradient misses the other cp
// ranks' columns. checks/ derives the bridge's planted bugs from this class.
#pragma once

#include <memory>

#include <ATen/ATen.h>

#include "lib/distributed/runtime/bridge_topology.h"
#include "lib/distributed/runtime/group.h"

namespace magic::dist {

class Bridge {
 public:
  // `bridge`, `cp`: this rank's bridge group and lm cp group (nullptr: the rank alone).
  Bridge(BridgeKind kind, std::shared_ptr<const Group> bridge, std::shared_ptr<const Group> cp);
  virtual ~Bridge() = default;

  // [encoder shard rows, P, d], replicated over the encoder's tp group -> [lm shard rows,
  // columns.numel(), d]; `columns`: the prefix positions (in 0..P-1) this cp rank holds, in its order.
  at::Tensor to_lm(const at::Tensor& encoder_out, const at::Tensor& columns) const;

 protected:
  virtual at::Tensor fan(const at::Tensor& encoder_out) const;
  virtual at::Tensor enter_cp(const at::Tensor& prefix) const;
  virtual at::Tensor select_columns(const at::Tensor& prefix, const at::Tensor& columns) const;

  BridgeKind kind_;
  std::shared_ptr<const Group> bridge_, cp_;
};

}  // namespace magic::dist
