#include "lib/train/distributed_lm.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/mesh_layout.h"

namespace magic {

void require_mesh_topology(const dist::TopologySpec& topology, const std::string& tool) {
  if (topology.family() != dist::TopologyFamily::kMesh) {
    throw InputError("--topology " + topology.str() + ": " + tool +
                     " trains a language model, which runs on mesh layouts (dp=N[,cp=C][,fsdp=F]); three-pool "
                     "layouts are magic-check's decomposition workload");
  }
}

void require_built_axes(const dist::TopologySpec& topology, const std::string& tool) {
  if (topology.family() != dist::TopologyFamily::kMesh) return;
  auto refuse = [&](const std::string& key) {
    throw InputError(str_cat("--topology ", topology.str(), ": ", key, " is not built into ", tool, " yet"));
  };
  if (topology.tp() > 1 && tool != "magic-check") refuse("tp");
  if (topology.sp()) refuse("sp");
  if (topology.mb() > 1) refuse("mb");
}

dist::MeshParts lm_mesh_parts(const dist::Runtime& runtime, const dist::TopologySpec& topology,
                              const GptConfig& model) {
  const dist::MeshGroups groups = dist::make_mesh_groups(runtime, dist::MeshLayout(topology));
  // Only the shapes matter here: the parts shard tensors shaped like the parameters.
  return dist::mesh_parts(groups, gpt_init(model, at::kDouble, 0), gpt_parallel_plan(), topology.sp());
}

std::shared_ptr<const dist::DataParallel> lm_data_parallel(const dist::Runtime& runtime,
                                                           const dist::TopologySpec& topology, const GptConfig& model) {
  return std::make_shared<dist::DataParallel>(lm_mesh_parts(runtime, topology, model), dist::Convention::kSum);
}

}  // namespace magic
