// The bridge's planted bugs (issue 45's mutations that live in the bridge itself), each a variant
// of dist::Bridge overriding one step (lib/distributed/parallel/bridge.h), as planted_variants.h
// does for the mesh. What each does to the gradient an encoder shard receives:
//   bridge-no-intra-cp-sum         enter_cp is the identity: the shard keeps its own cp rank's
//                                  columns only (terms missing)
//   bridge-fan-out-pooled-over-cp  fan-out's adjoint sums the zero-padded slices over every rank of
//                                  the encoder block with its lm tp index, every cp level included:
//                                  after the intra-cp sum each slice arrives cp times (x cp)
//   bridge-fan-in-wrong-offset     fan-in's adjoint takes the next member's rows, not its own (the
//                                  shards' gradients trade places)
//   bridge-fan-out-cp0-slice       fan-out's slice computed from the cp = 0 view: cp > 0 ranks keep
//                                  the whole shard, rows their language model does not have. A run
//                                  that would hang in a real stack; here it ends with the rank, its
//                                  phase and both shapes named (gpt_forward refuses the prefix)
// An empty name gives the correct bridge. Collective: every rank calls it, in the same order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lib/distributed/parallel/bridge.h"
#include "lib/distributed/parallel/bridge_layout.h"

namespace magic::checks {

struct BridgeMutation {
  std::string name;
  std::string description;
  std::string factor;  // the factor the shard's gradient shows, or "" (terms missing or misplaced)
  // Where it applies: "" where it does, else why not.
  std::string (*unmet)(const dist::BridgeTopology& topology);
  // The run ends with a named rank failure rather than wrong values (exit 1): --mutate checks it,
  // --bite cannot go on from it.
  bool ends_the_run = false;
};
const std::vector<BridgeMutation>& bridge_mutations();
// Whether `name` is one of bridge_mutations() (planted in the bridge, not in a mesh).
bool is_bridge_mutation(const std::string& name);

// std::logic_error for a name not in bridge_mutations(); std::invalid_argument where it does not
// apply to `layout`.
std::unique_ptr<dist::Bridge> planted_bridge(const std::string& mutation, const dist::Runtime& runtime,
                                             const dist::BridgeLayout& layout, const dist::BridgeGroups& groups);

}  // namespace magic::checks
