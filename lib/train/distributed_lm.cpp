#include "lib/train/distributed_lm.h"

#include <algorithm>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/mesh_layout.h"
#include "lib/distributed/parallel/pipeline_schedule.h"

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

void require_pipeline_fits(const dist::TopologySpec& topology, const GptConfig& model) {
  const std::string what = str_cat("--topology ", topology.str());
  const dist::PipelineSchedule schedule = dist::parse_pipeline_schedule(topology.schedule, "--schedule");
  if (topology.pp() == 1) return;
  if (topology.pp() > model.n_layers) {
    throw InputError(str_cat(what, ": pp=", topology.pp(), " stages for a model of ", model.n_layers,
                             model.n_layers == 1 ? " layer" : " layers",
                             "; every stage needs a layer (pp <= n_layers)"));
  }
  pipeline_chunks(model.n_layers, topology.pp(), topology.vpp(), 0, what);
  dist::validate_pipeline_schedule(schedule, topology.pp(), topology.vpp(), topology.mb(), what);
}

void require_ring_fits(const dist::TopologySpec& topology, const GptConfig& model, const std::string& source) {
  const int64_t chunks = 2 * topology.cp();
  if (!topology.ring() || model.max_len % chunks == 0) return;
  throw InputError(str_cat("--topology ", topology.str(), ": ring attention splits each sequence into 2·cp = ", chunks,
                           " zig-zag chunks of equal length, but ", source, " max_len = ", model.max_len,
                           " is not a multiple of ", chunks));
}

dist::StageParts lm_stage_parts(const dist::MeshGroups& groups, const dist::TopologySpec& topology,
                                const GptConfig& model, const TensorTree& full) {
  dist::StageParts out;
  const dist::MeshLayout& layout = groups.layout;
  const int64_t pp = layout.pp(), vpp = topology.vpp(), stage = layout.pp_index(groups.rank);
  out.run = {groups.pp.get(), pp, vpp, stage, dist::parse_pipeline_schedule(topology.schedule, "--schedule")};
  out.chunks = pipeline_chunks(model.n_layers, pp, vpp, stage, str_cat("--topology ", topology.str()));
  for (const auto& p : gpt_stage_parameters(model, out.chunks, full)) out.held.push_back(p.name);
  for (int64_t s = pp - 1; s >= 0; --s) {  // the first stage that holds each, written last
    const auto chunks = pipeline_chunks(model.n_layers, pp, vpp, s, "");
    for (const auto& p : gpt_stage_parameters(model, chunks, full)) out.owner[p.name] = s;
  }
  if (model.tied_head && pp > 1) out.tied = "tok_emb";
  return out;
}

dist::MeshParts lm_mesh_parts(const dist::Runtime& runtime, const dist::TopologySpec& topology,
                              const GptConfig& model) {
  const dist::MeshGroups groups = dist::make_mesh_groups(runtime, dist::MeshLayout(topology));
  // Only the shapes matter here: the parts shard tensors shaped like the parameters.
  const TensorTree full = gpt_init(model, at::kDouble, 0);
  return dist::mesh_parts(groups, full, gpt_parallel_plan(), topology.sp(),
                          lm_stage_parts(groups, topology, model, full), topology.ring());
}

std::shared_ptr<const dist::DataParallel> lm_data_parallel(const dist::Runtime& runtime,
                                                           const dist::TopologySpec& topology, const GptConfig& model) {
  return std::make_shared<dist::DataParallel>(lm_mesh_parts(runtime, topology, model), dist::Convention::kSum);
}

}  // namespace magic
