#include "lib/distributed/parallel/ring_attention.h"

#include <limits>

namespace magic::dist {

at::Tensor block_product(const at::Tensor& a, const at::Tensor& block, const at::Tensor&) {
  return at::matmul(a, block);
}

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& query_positions, const at::Tensor& key_positions, const Group* group,
                          RingSteps ring) {
  const int64_t steps = group ? group->size() : 1;
  // Every block that travels has the shape of this member's k: checked once, not at every step.
  if (group) group->require_equal_shapes(k, "ring_attention");
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor block_k = k, block_v = v, block_positions = key_positions;
  at::Tensor running_max, total, weighted;  // m [B, H, Tq, 1], ℓ [B, H, Tq, 1], a [B, H, Tq, D]
  for (int64_t s = 0; s < steps; ++s) {
    if (s > 0) {
      block_k = ring.shift(block_k, *group, 1);
      block_v = ring.shift(block_v, *group, 1);
      block_positions = ring.shift(block_positions, *group, 1);
    }
    const at::Tensor future = block_positions.unsqueeze(0) > query_positions.unsqueeze(1);  // [Tq, Tk]
    const at::Tensor scores = ring.product(q, block_k.transpose(-2, -1), k.transpose(-2, -1)) +
                              at::where(future, -inf, 0.0).to(q.scalar_type());
    const at::Tensor block_max = std::get<0>(scores.detach().max(-1, true));
    if (s == 0) {
      running_max = block_max;  // finite: every query sees its own position in its own block
      const at::Tensor p = at::exp(scores - running_max);
      total = p.sum(-1, true);
      weighted = ring.product(p, block_v, v);
      continue;
    }
    const at::Tensor next_max = at::maximum(running_max, block_max);
    const at::Tensor correction = at::exp(running_max - next_max);
    const at::Tensor p = at::exp(scores - next_max);
    total = total * correction + p.sum(-1, true);
    weighted = weighted * correction + ring.product(p, block_v, v);
    running_max = next_max;
  }
  return weighted / total;
}

}  // namespace magic::dist
