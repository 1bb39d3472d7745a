// Data parallelism on a dp x cp x tp mesh with fsdp-way sharded parameters (docs/magic-check.md,
// "How the distributed pipeline reduces gradients"): the Parallelism the LM step is given on mesh
// layouts. Rows: the global batch is split into contiguous shards over the dp index, sizes
// differing by at most one (uneven splits allowed; a replica may get none); columns: the cp ranks
// of a replica split each sequence (context_parallel.h); the model: the tp ranks split every layer
// as the model's plan says (lib/model/parallel_plan.h, tensor_parallel_group.h), every tp rank
// holding the same rows, columns and loss; parameters: each rank stores the fsdp shard of its
// tensor-parallel piece (sharded_parameters.h).
//   SUM convention: each rank's loss is its partial sum over the honest global count of valid
//                   labels across dp·cp (tp ranks hold the same labels); the gradient reduction
//                   is a SUM. Exact for any split.
//   AVG convention: local mean, AVG reduction over dp·cp (SUM then / dp·cp). Exact only when
//                   every rank (row shard and chunk pair) holds the same number of valid labels.
// The reduction happens in autograd: the local loss is evaluated on enter(θ) and differentiated
// with respect to the stored θ, so the reduced gradient comes out of the collectives' backward
// and stays differentiable for REPLAY and HVPs.
// checks/planted_variants.cpp derives the planted bugs of the mutation catalog from this class
// and from ContextParallel and ShardedParameters.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "lib/distributed/parallel/context_parallel.h"
#include "lib/distributed/parallel/mesh_layout.h"
#include "lib/distributed/parallel/pipeline_stage_runner.h"
#include "lib/distributed/parallel/sharded_parameters.h"
#include "lib/model/parallel_plan.h"
#include "lib/step/parallelism.h"

namespace magic::dist {

enum class Convention { kSum, kAvg };
Convention parse_convention(const std::string& name);
std::string convention_name(Convention convention);

// The [begin, end) of shard `rank` when `total` items split over `size` ranks.
std::pair<int64_t, int64_t> shard_range(int64_t total, int rank, int size);

// The mesh of `layout`'s trace records and rank `rank`'s coordinates on it, no placements: [dp, cp],
// or [replica, cp, fsdp] with sharded parameters (dp index = replica·fsdp + shard index), tp
// before fsdp where tp > 1 ([dp, cp, tp], [replica, cp, tp, fsdp]), pp first where pp > 1. Outermost first, in the
// order the splits are made (docs/dump-format.md, "Placements"): fsdp shards each tp piece, tp each cp chunk pair, and
// fsdp the rows of a replica.
TraceLayout trace_mesh(const MeshLayout& layout, int rank);

// How rank `rank`'s traced tensors make up the whole on `layout` (lib/trace/trace_layout.h): rows
// are contiguous shards over the dp index, columns zig-zag chunk pairs over cp, parameters dim-0
// shards over fsdp and, where tp > 1, each one placed along tp as `plan` splits it (`whole_rows`:
// every parameter's dim-0 size, a vocabulary's length), logits split over the vocabulary; the loss
// is a partial sum (SUM) or average (AVG) over every dimension but tp, whose ranks hold the same.
// Under `sequence_parallel` the residual stream is a sequence shard over tp as well. With pp > 1 a
// parameter is held by the stages `stages_holding` names (docs/dump-format.md, "Pieces some ranks
// hold"), and activations, logits and the loss by the stage that records them.
TraceLayout mesh_trace_layout(const MeshLayout& layout, int rank, Convention convention, const ParallelPlan& plan,
                              const std::map<std::string, int64_t>& whole_rows, bool sequence_parallel,
                              const std::map<std::string, std::vector<int64_t>>& stages_holding = {});

// A pipeline stage's share of the model (pp > 1; docs/design.md, "Pipeline stages"). The model
// decides it (lib/train/distributed_lm.h); the mesh only holds it.
struct StageParts {
  PipelineStageRun run;                  // the pipeline group, pp, vpp, this stage, the schedule
  std::vector<PipelineStage> chunks;     // this stage's, virtual stage 0 first
  std::vector<std::string> held;         // the parameters this stage holds, in the model's order
  std::map<std::string, int64_t> owner;  // every parameter: the first stage that holds it
  std::string tied;  // a tied head's token embedding, held by the first and the last stage; "" if none
};

// The pieces a DataParallel is made of; planted variants replace one of them.
struct MeshParts {
  MeshGroups groups;
  std::shared_ptr<const ContextParallel> context;
  std::shared_ptr<const TensorParallel> tensor;  // SingleRank when tp = 1
  bool sequence_parallel = false;
  ParallelPlan plan;
  // How stored shards enter: `parameters` for every parameter whose gradient is complete on each
  // tp rank (tensor-parallel pieces, and replicated ones without sp), `summed_over_tp` for the
  // replicated ones under sp, whose every tp rank holds a partial gradient (replica_tp group).
  std::shared_ptr<const ShardedParameters> parameters, summed_over_tp;
  std::map<std::string, int64_t> full_rows;                  // dim-0 size of every parameter's tp piece
  std::map<std::string, int64_t> whole_rows;                 // dim-0 size of every whole parameter
  std::map<std::string, std::vector<int64_t>> whole_shapes;  // every whole parameter's shape
  std::vector<std::string> names;                            // every parameter, in the model's order
  StageParts stage;                                          // pp = 1: the whole model
};
// The correct pieces for `groups`, for parameters shaped like `full_params` split by `plan`.
// `ring`: attention over the cp group by ring attention (cp_impl=ring) rather than gathered keys.
MeshParts mesh_parts(const MeshGroups& groups, const TensorTree& full_params, const ParallelPlan& plan = {},
                     bool sequence_parallel = false, StageParts stage = {}, bool ring = false);

class DataParallel : public Parallelism {
 public:
  DataParallel(MeshParts parts, Convention convention);

  std::vector<int64_t> local_share(const std::vector<int64_t>& global) const override;
  double mean_denominator(double local_valid_labels) const override;
  ModelLayout model_layout(int64_t length) const override;
  TensorTree shard(const TensorTree& full) const override;
  TensorTree unshard(const TensorTree& local) const override;
  TensorTree enter(const TensorTree& params) const override;
  at::Tensor global_squares(const TensorTree& grads) const override;
  TensorTree apply_clip(const TensorTree& grads, const at::Tensor& coefficient) const override;
  TensorTree reduce_gradient(const TensorTree& grads) const override;
  TensorTree apply_convention(const TensorTree& grads) const override;
  TensorTree optimizer_input(const TensorTree& clipped) const override { return clipped; }
  MicroBatchGradients micro_batch_gradients(const TensorTree& params, const MicroBatchPass& pass,
                                            bool create_graph) const override;
  std::vector<at::Tensor> micro_batch_losses(const TensorTree& params, const MicroBatchPass& pass) const override;
  ReductionGroupSums sum_over_reduction_groups(const TensorTree& local) const override;
  at::Tensor sum_across_ranks(const at::Tensor& local) const override;
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override;
  bool runs_collectives() const override { return true; }
  TraceLayout trace_layout() const override;

  const MeshLayout& layout() const { return parts_.groups.layout; }
  const Group& world() const { return *parts_.groups.world; }
  int rank() const { return parts_.groups.rank; }
  Convention convention() const { return convention_; }

 protected:
  const MeshParts& parts() const { return parts_; }
  // Whether `name` is split across tp ranks (its pieces differ) rather than held whole by each.
  bool split_over_tp(const std::string& name) const;
  // Σ over the ranks that split the batch (tp ranks hold the same rows and columns).
  at::Tensor sum_over_batch(const at::Tensor& local) const;
  // The same and over the pipeline's stages, whose last alone holds the loss and dw.
  at::Tensor sum_over_batch_and_stages(const at::Tensor& local) const;
  bool pipelined() const { return layout().pp() > 1; }
  // Whether this rank holds the last stage's copy of a tied embedding, `name`: its gradient and
  // clipping are the first stage's, but it counts nowhere a second time (norm, clip derivative).
  bool tied_copy(const std::string& name) const;

  // enter, global_squares and apply_clip within this rank's pipeline stage (the whole of them
  // without pp): no tied embedding's sum, no sum over the stages.
  TensorTree enter_stage(const TensorTree& params) const;
  at::Tensor stage_squares(const TensorTree& grads) const;
  TensorTree clip_stage(const TensorTree& grads, const at::Tensor& coefficient) const;

 private:
  MeshParts parts_;
  Convention convention_;
};

}  // namespace magic::dist
