// The text of --explain-layout (magic-check and magic-run): a mesh or bridge topology's rank order and, for
// every rank, its coordinates and the members of its groups, as mesh_layout.h forms them. Both
// tools print it and exit without starting a rank (docs/magic-check.md, "Explaining a layout").
#pragma once

#include <string>

#include "lib/distributed/runtime/bridge_topology.h"
#include "lib/distributed/runtime/topology.h"

namespace magic::dist {

// The explanation of a mesh `topology` (its family kMesh), ending in a newline.
std::string explain_mesh_layout(const TopologySpec& topology);
// The explanation of an encoder/LM bridge layout (bridge_layout.h): both sides' coordinates and
// groups of every rank, and its bridge group.
std::string explain_bridge_layout(const BridgeTopology& topology);

}  // namespace magic::dist
