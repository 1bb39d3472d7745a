// What a factor named on one row means beside the rest of its level and the layout's sizes
// (docs/magic-check.md, "Columns, tolerance and diagnosis"):
//  - a scale on one tensor of a level whose other rows pass is that tensor's own bug, not a
//    reduction's or a normalizer's (which would scale every row of the level): "on this tensor only";
//  - where several sizes of the layout have the scale's value ("x dp or x cp" on dp=2,cp=2) the
//    layout cannot tell them apart: the row says so and names a nearby layout whose sizes differ.
#pragma once

#include <string>
#include <vector>

#include "lib/compare/check_row.h"
#include "lib/core/precision_policy.h"
#include "lib/distributed/runtime/topology.h"

namespace magic::checks {

// Appends that context to the diagnosis of each failing row that names a factor.
void add_factor_context(std::vector<CheckRow>& rows, const dist::TopologySpec& topology,
                        const PrecisionPolicy& precision);

// The smallest layout of the same family, no size smaller than `topology`'s and the same sizes
// above 1, whose named sizes (and the loss scale, where it is >= 2) are all different: "dp=2,cp=3"
// for dp=2,cp=2. `topology` itself when its sizes differ already.
dist::TopologySpec layout_with_distinct_sizes(const dist::TopologySpec& topology, const PrecisionPolicy& precision);

}  // namespace magic::checks
