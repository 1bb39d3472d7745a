// Ring attention (issue 47's second context-parallel implementation, beside gathering K and V):
// each member of the cp group keeps its own columns' queries, and the K/V blocks travel the ring
// (shift_ring: member r − s's block at step s), the softmax combined online:
//   m ← max(m, max_j s_j),  ℓ ← ℓ·e^(m_old − m) + Σ_j e^(s_j − m),  a ← a·e^(m_old − m) + Σ_j e^(s_j − m)·v_j,
//   y = a / ℓ.
// The running max m only keeps the exponentials in range; softmax does not depend on it, so it is
// held constant (detached), which keeps every derivative exact. The backward passes the blocks'
// cotangents back around the ring to their owners (shift_ring's adjoint), and is itself made of
// the same operations, so every order of derivative crosses the ring.
#pragma once

#include <ATen/ATen.h>

#include "lib/distributed/collectives/collectives.h"
#include "lib/distributed/runtime/group.h"

namespace magic::dist {

// The ring step: shift_ring, or a planted variant of it (shift_ring_cotangent_onward).
using RingShift = at::Tensor (*)(const at::Tensor& x, const Group& group, int64_t offset);
// a·b for a block b that the ring brought (scores q·kᵀ, outputs p·v), given this member's own
// block `own` of the same shape: block_product, or a planted variant (checks/planted_variants.cpp).
using RingProduct = at::Tensor (*)(const at::Tensor& a, const at::Tensor& block, const at::Tensor& own);
at::Tensor block_product(const at::Tensor& a, const at::Tensor& block, const at::Tensor& own);

// The operations a ring step is made of.
struct RingSteps {
  RingShift shift = shift_ring;
  RingProduct product = block_product;
};

// softmax(q kᵀ + causal mask) v for this member's queries q [B, H, Tq, D] (scaled already) at
// true positions `query_positions` [Tq], against every member's keys and values: this member's
// k, v [B, H, Tk, D] at `key_positions` [Tk] and those the ring brings (the same shapes on every
// member). Key j is masked for query i when its position is after i's. Every query must see a key
// of its own block (its own position), as a causal layout's do. `group` nullptr: one member.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& query_positions, const at::Tensor& key_positions, const Group* group,
                          RingSteps steps = {});

}  // namespace magic::dist
