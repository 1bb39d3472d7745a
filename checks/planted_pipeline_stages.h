// The pipeline-stage mutations of the catalog (checks/mutations.cpp): variants of the mesh's
// DataParallel with pp > 1 that plant the public record's silent bugs of pipeline parallelism.
#pragma once

#include <memory>
#include <string>

#include "lib/distributed/parallel/data_parallel.h"

namespace magic::checks {

bool is_pipeline_stage_mutation(const std::string& mutation);

// The variant of `mutation` (is_pipeline_stage_mutation) made of `parts`.
std::shared_ptr<const Parallelism> planted_pipeline_stages(const std::string& mutation, dist::MeshParts parts,
                                                           dist::Convention convention);

}  // namespace magic::checks
