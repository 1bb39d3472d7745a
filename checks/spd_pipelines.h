// The decomposition workload of magic-check (three-pool layouts), run twice on the same data,
// init and order: the three-pool pipeline (lib/distributed/pools/three_pool_spd, REPLAY) on every rank, and
// the single-process reference (reference/unrolled_spd). Parameter groups are θ_ci (every CI
// MLP) and V/U (every site's components); gradients are also compared per loss term, where a
// planted bug shows as a clean factor:
//   grad/theta_ci, grad/theta_ci[reconstruction|importance|ppgd],
//   grad/V/U, grad/V/U[faithfulness|reconstruction|ppgd]     (every step at the reference's
//                                                               state, concatenated)
//   optimizer/clip_coefficient, optimizer/theta_ci|V/U[input], optimizer/theta_ci|V/U[update]
//                                                             (one step from the reference's state)
//   query_grad/theta_ci, query_grad/V/U;  hvp/theta_0, hvp/theta_N
//   final_params/theta_ci, final_params/V/U, final_params/sources;  scores/per_document
#pragma once

#include "checks/pipeline_outputs.h"
#include "lib/data/data_stream.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/model/spd.h"
#include "lib/optim/optimizer.h"

namespace magic::checks {

// Everything both sides draw from the settings: config, data, order, optimizer, init.
struct SpdProblem {
  SpdConfig config;
  SpdData data;
  std::shared_ptr<const DataStream> stream;
  std::shared_ptr<const Optimizer> optimizer;
  TensorTree initial_params, initial_sources;
  uint64_t source_seed = 0;
  // Clipped by the global norm at clip_norm_between of the fp64 step norms at θ_0 (lm_pipelines.h),
  // so that the clip fires on some steps and not on others.
  std::optional<double> clip_norm;
};
SpdProblem spd_problem(const CheckSettings& settings);

// Every rank calls it; the grad level is evaluated at `teacher` (the reference's states).
// `mutation` names the planted variant of the three-pool conventions ("" for none).
// `records`: on rank 0, the run's records for the first divergence, whole (first_divergence.h).
// `live`: the rank's live tracer (docs/tracer.md); rank 0 writes the run's whole records to it
// once they are assembled (this workload has no trace points of its own); null: none.
PipelineOutputs run_distributed_spd(const CheckSettings& settings, const dist::Runtime& runtime,
                                    const std::string& mutation, const std::vector<TrainState>& teacher,
                                    std::vector<DumpSink::Entry>* records = nullptr, TraceSink* live = nullptr);
ReferenceRun run_reference_spd(const CheckSettings& settings);

}  // namespace magic::checks
