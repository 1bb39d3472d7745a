#include "lib/train/distributed_lm.h"

#include <algorithm>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/mesh_layout.h"

namespace magic {

void require_mesh_topology(const dist::TopologySpec& topology, const std::string& tool) {
  if (topology.family() != dist::TopologyFamily::kMesh) {
    throw InputError("--topology " + topology.str() + ": " + tool +
                     " trains a language model, which runs on mesh layouts (dp=N[,cp=C][,tp=T][,fsdp=F]); three-pool "
                     "layouts are magic-check's decomposition workload");
  }
}

void require_tensor_parallel_fits(const dist::TopologySpec& topology, const GptConfig& model) {
  validate_tensor_parallel(model, topology.tp(), str_cat("--topology ", topology.str()));
}

void require_micro_batches_fit(const dist::TopologySpec& topology, int64_t batch, const std::string& batch_name) {
  const int64_t mb = topology.mb(), dp = topology.dp();
  if (mb == 1 || batch / dp >= mb) return;  // the smallest replica's share is floor(batch / dp)
  throw InputError(str_cat("--topology ", topology.str(), ": mb=", mb, " needs at least ", mb,
                           " rows on every dp replica (one per micro-batch), but ", batch_name, " of ", batch,
                           " rows gives a replica ", batch / dp, "; use a batch of at least dp*mb = ", dp * mb,
                           " rows or mb <= ", std::max<int64_t>(1, batch / dp)));
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
