// The planted bugs of the mutation catalog (mutations.h), as variants of the objects the
// distributed pipelines are already given: the data parallelism of the mesh layout (with its
// context-parallel and sharded-parameter parts) and the
// reduction conventions of the three-pool step (docs/design.md, "Mutations enter through one seam").
// Each variant overrides one method of the correct object; lib/ holds no branch for any of them.
// An empty mutation name gives the correct object.
#pragma once

#include <memory>
#include <string>

#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/pools/three_pool_conventions.h"

namespace magic::checks {

// std::logic_error for a name that is not a mesh mutation of the catalog.
// The variant replaces one method of DataParallel or one of its parts (its ContextParallel or
// ShardedParameters).
std::shared_ptr<const Parallelism> planted_data_parallel(const std::string& mutation, dist::MeshParts parts,
                                                         dist::Convention convention);

// Whether `mutation` is planted on a bridge layout's two meshes alike (the encoder's too), not on
// the language model's alone.
bool planted_on_both_bridge_sides(const std::string& mutation);

// std::logic_error for a name that is not a three-pool mutation of the catalog.
std::shared_ptr<const dist::ThreePoolConventions> planted_three_pool_conventions(const std::string& mutation);

}  // namespace magic::checks
