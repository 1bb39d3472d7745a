// Portals (docs/design.md, "Distribution"): differentiable point-to-point transfers between pools.
//   forward:  the source sends x, the destination receives it
//   backward: the destination sends the cotangent back, the source receives it
// and each backward is built from the same two Functions, so any derivative order works.
//
// Matching. Messages between two ranks are matched by their order: both sides issue a pair's
// transfers in the same order, which the pipelines guarantee by sending at most one message per
// direction and peer in each pass (forward, each backward). That is what NCCL point-to-point
// needs (it has no tags). A transfer and its derivatives still carry distinct logical tags
// (tag, tag+1, ...): they name the derivative order in errors, and on Gloo they are sent as
// the wire tag, which catches an ordering slip as a mismatch. With PortalTags::kZero (or
// MAGIC_PORTAL_TAGS=zero; NCCL always) every wire tag is 0 and only the order matches them.
// Sends are posted without waiting; receives wait for their message.
//
// Two rules keep every rank's backward passes reaching every portal:
//  - the source adds the token portal_send returns (a zero) to its loss;
//  - the destination names an anchor, a tensor of its own state that requires grad (the 0-dim
//    "sync" parameter); the gradient the anchor receives carries the higher-order portals.
// A portal one side never reaches fails on the other side within the group's timeout, naming the
// portal, the phase (training step k, REPLAY step k, ...) and both ranks.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lib/distributed/runtime/group.h"

namespace magic::dist {

enum class PortalTags { kPerTransfer, kZero };
// The process-wide wire-tag mode (default: MAGIC_PORTAL_TAGS=zero -> kZero, else kPerTransfer).
void set_portal_tags(PortalTags mode);
PortalTags portal_tags();

// A portal's identity: a name for messages ("gates") and its base logical tag.
struct PortalId {
  std::string name;
  int64_t tag = 0;
};

// Sends x to `peer` (a rank of `group`); returns a 0-dim zero token for the caller's loss.
at::Tensor portal_send(const at::Tensor& x, const Group& group, int peer, const PortalId& id);

// Receives a tensor of `shape` from `peer`; differentiable through `anchor`.
at::Tensor portal_recv(const at::Tensor& anchor, const std::vector<int64_t>& shape, const Group& group, int peer,
                       const PortalId& id);

// A portal_recv's source (a rank of the group) and the shape it receives.
struct PortalSource {
  int peer = 0;
  std::vector<int64_t> shape;
};

// portal_recv from each source in turn, with every receive posted before any is waited for: a
// Gloo sender sends only once its receiver has posted, so receives made one at a time cost a
// round trip each, one after the other.
std::vector<at::Tensor> portal_recv_all(const at::Tensor& anchor, const std::vector<PortalSource>& sources,
                                        const Group& group, const PortalId& id);

// Waits for every send this rank (the caller's global rank in `group`) has posted. Pending sends
// are kept per rank, not per thread: autograd may run a backward on another thread.
void wait_portal_sends(const Group& group);

}  // namespace magic::dist
