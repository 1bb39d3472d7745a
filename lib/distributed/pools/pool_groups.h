// The process groups of the three-pool layout (three_pool_layout.h): the world, and this rank's
// pool group (the CI pool, its block, or the PPGD pool), each reducing its pool's gradient.
#pragma once

#include <memory>

#include "lib/distributed/pools/three_pool_layout.h"
#include "lib/distributed/runtime/runtime.h"

namespace magic::dist {

struct ThreePoolGroups {
  std::shared_ptr<const Group> world, ci, block, ppgd;  // block/ppgd/ci: null where not a member
};

// Every rank calls it, in the same order; a second call with the same layout gets the same groups.
ThreePoolGroups make_three_pool_groups(const Runtime& runtime, const ThreePoolLayout& layout);

}  // namespace magic::dist
