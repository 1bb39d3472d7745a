// The portals between pools (portal.h) of the three-pool step. Each transfer kind of each phase
// (training step t, or the query after the last step) owns a block of 8 logical tags (forward
// and derivative orders):
//   gates       CI ranks -> block and PPGD ranks holding the same rows (pool_rows.h)
//   components  block ranks -> every PPGD rank (their V/U replica)
//   query gates CI ranks -> block ranks, for the query loss
#pragma once

#include <vector>

#include "lib/distributed/pools/pool_rows.h"
#include "lib/distributed/pools/portal.h"

namespace magic::dist {

enum PortalKind : int64_t { kTrainGates = 0, kTrainComponents = 1, kQueryGates = 2 };
PortalId portal_id(int64_t phase, PortalKind kind);

// The ranks that consume the gates: every block rank, then (with_ppgd) every PPGD rank.
std::vector<int> consumers_of_gates(const ThreePoolLayout& layout, bool with_ppgd);

// A CI rank sends each consumer the gates [rows, sites, components] of the rows they share and
// returns the sum of the portal tokens (zeros that carry the cotangents back).
at::Tensor send_gates(const ThreePoolLayout& layout, const Group& world, int rank, const std::vector<int>& consumers,
                      const at::Tensor& gates, int64_t batch, const PortalId& id);
// A consumer receives its rows' gates from the CI ranks holding them, in row order.
at::Tensor receive_gates(const ThreePoolLayout& layout, const Group& world, int rank, const at::Tensor& anchor,
                         int64_t batch, int64_t sites, int64_t components, const PortalId& id);

}  // namespace magic::dist
