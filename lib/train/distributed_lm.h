// The LM workload on a mesh layout (dp x cp x tp ranks, fsdp-sharded parameters): the one place where
// magic-run --topology and magic-check's lm workload get their data parallelism, so both run the
// same step, reductions and REPLAY (build_lm_problem + run_magic) on it.
#pragma once

#include <memory>

#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/distributed/runtime/topology.h"
#include "lib/model/gpt.h"

namespace magic {

// Throws InputError unless `topology` is a mesh layout (three-pool layouts run the decomposition
// workload of magic-check, not a language model).
void require_mesh_topology(const dist::TopologySpec& topology, const std::string& tool);

// Throws InputError naming the topology unless its tp ranks can split `model`: tp must divide the
// attention heads (validate_tensor_parallel). Both tools call it before any rank starts.
void require_tensor_parallel_fits(const dist::TopologySpec& topology, const GptConfig& model);

// Throws InputError unless every dp replica's share of a `batch`-row step (contiguous shards,
// sizes differing by at most one) holds at least the topology's mb rows: one per micro-batch.
// `batch_name` says where the batch came from ("--batch", "training.batch_size").
void require_micro_batches_fit(const dist::TopologySpec& topology, int64_t batch, const std::string& batch_name);

// Throws InputError naming the topology unless its pipeline can run `model`: a known --schedule;
// pp <= n_layers; pp·vpp chunks of equal length; enough micro-batches for the schedule
// (pipeline_schedule.h). Both tools call it before any rank starts.
void require_pipeline_fits(const dist::TopologySpec& topology, const GptConfig& model);

// Throws InputError naming the topology unless ring attention (cp_impl=ring) can cut `model`'s
// sequences into 2·cp zig-zag chunks of equal length: max_len a multiple of 2·cp. `source` says
// where max_len came from ("the config's model").
void require_ring_fits(const dist::TopologySpec& topology, const GptConfig& model, const std::string& source);

// This rank's pipeline stage of `model` (`full`: parameters shaped like the model's).
dist::StageParts lm_stage_parts(const dist::MeshGroups& groups, const dist::TopologySpec& topology,
                                const GptConfig& model, const TensorTree& full);

// This rank's mesh groups and the correct pieces for the model's parameters. Every rank of the
// world calls it, in the same order (groups are created collectively).
dist::MeshParts lm_mesh_parts(const dist::Runtime& runtime, const dist::TopologySpec& topology, const GptConfig& model);

// The production data parallelism: SUM convention (exact for any split of the batch).
std::shared_ptr<const dist::DataParallel> lm_data_parallel(const dist::Runtime& runtime,
                                                           const dist::TopologySpec& topology, const GptConfig& model);

}  // namespace magic
