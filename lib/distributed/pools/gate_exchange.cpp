#include "lib/distributed/pools/gate_exchange.h"

namespace magic::dist {

PortalId portal_id(int64_t phase, PortalKind kind) {
  static const char* const names[] = {"gates", "components", "query gates"};
  return {names[kind], (phase * 4 + kind) * 8};
}

std::vector<int> consumers_of_gates(const ThreePoolLayout& layout, bool with_ppgd) {
  std::vector<int> ranks;
  for (int64_t k = 0; k < layout.n_blocks(); ++k) {
    for (int r : layout.block_ranks(k)) ranks.push_back(r);
  }
  if (with_ppgd) {
    for (int r : layout.ppgd_ranks()) ranks.push_back(r);
  }
  return ranks;
}

at::Tensor send_gates(const ThreePoolLayout& layout, const Group& world, int rank, const std::vector<int>& consumers,
                      const at::Tensor& gates, int64_t batch, const PortalId& id) {
  const RowRange mine = rows_of(layout, rank, batch);
  at::Tensor tokens = at::zeros({}, gates.options());
  for (int consumer : consumers) {
    const RowRange shared = overlap(mine, rows_of(layout, consumer, batch));
    if (shared.begin >= shared.end) continue;
    tokens = tokens + portal_send(gates.narrow(0, shared.begin - mine.begin, shared.size()), world, consumer, id);
  }
  return tokens;
}

at::Tensor receive_gates(const ThreePoolLayout& layout, const Group& world, int rank, const at::Tensor& anchor,
                         int64_t batch, int64_t sites, int64_t components, const PortalId& id) {
  const RowRange mine = rows_of(layout, rank, batch);
  std::vector<PortalSource> sources;
  for (int source : layout.ci_ranks()) {
    const RowRange shared = overlap(mine, rows_of(layout, source, batch));
    if (shared.begin >= shared.end) continue;
    sources.push_back({source, {shared.size(), sites, components}});
  }
  return at::cat(portal_recv_all(anchor, sources, world, id));
}

}  // namespace magic::dist
