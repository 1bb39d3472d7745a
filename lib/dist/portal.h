// Portals (DESIGN.md section 4): differentiable point-to-point transfers between pools.
//   forward:  the source sends x, the destination receives it
//   backward: the destination sends the cotangent back, the source receives it
// and each backward is built from the same two Functions, so any derivative order works.
//
// A transfer and its derivatives use consecutive tags (tag, tag+1, tag+2, ...) between the same
// two ranks, so messages are matched by (peer, tag) and ranks need not agree on a global order:
// sends are posted without waiting, receives wait for their message, and as long as the pools'
// exchanges form a DAG in each pass nothing waits in a cycle.
//
// Two rules keep every rank's backward passes reaching every portal:
//  - the source adds the token portal_send returns (a zero) to its loss;
//  - the destination names an anchor, a tensor of its own state that requires grad (the 0-dim
//    "sync" parameter); the gradient the anchor receives carries the higher-order portals.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "lib/dist/group.h"

namespace magic::dist {

// Sends x to `peer` (a rank of `group`); returns a 0-dim zero token for the caller's loss.
at::Tensor portal_send(const at::Tensor& x, const Group& group, int peer, int64_t tag);

// Receives a tensor of `shape` from `peer`; differentiable through `anchor`.
at::Tensor portal_recv(const at::Tensor& anchor, const std::vector<int64_t>& shape, const Group& group, int peer,
                       int64_t tag);

// Waits for every send this thread has posted (each rank thread keeps its own).
void wait_portal_sends();

}  // namespace magic::dist
