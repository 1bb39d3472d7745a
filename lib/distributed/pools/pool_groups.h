// The process groups of the three-pool layout (three_pool_layout.h): the world, this rank's pool
// group (the CI pool, its block, or the PPGD pool), each reducing its pool's gradient, and a
// second group of every rank for the clip's global norm (its own, so that the norm's collective
// and its derivatives never interleave with the portals' point-to-point traffic on the world).
#pragma once

#include <memory>

#include "lib/distributed/pools/three_pool_layout.h"
#include "lib/distributed/runtime/runtime.h"

namespace magic::dist {

struct ThreePoolGroups {
  std::shared_ptr<const Group> world, ci, block, ppgd;  // block/ppgd/ci: null where not a member
  std::shared_ptr<const Group> norm;                     // every rank
};

// Every rank calls it, in the same order; a second call with the same layout gets the same groups.
ThreePoolGroups make_three_pool_groups(const Runtime& runtime, const ThreePoolLayout& layout);

}  // namespace magic::dist
