// Off-by-default bugs that can be planted in the distributed pipeline, so the checks can prove
// they catch them (checks/mutations.h names them and states what each must trip).
#pragma once

namespace magic::dist {

enum class PlantedBug {
  kNone,
  kAvgReduce,                    // local mean + AVG reduction, whatever the convention says
  kLocalNormalizer,              // SUM reduction over losses normalized by the local count
  kMissingReduce,                // no gradient reduction at all
  kReplicatedAllReduceBackward,  // gradient reduced by an op whose backward is all_reduce_sum
  kDetachedCollective,           // gradient reduced by an op whose backward is not differentiable
  kExtraDivideScores,            // scores divided by the data-parallel size
  // Three-pool layout:
  kAvgCiReduce,                 // the CI pool averages its gradient reduction
  kPrescaleCi,                  // consumers of the gates pre-scale their cotangent by n_ci
  kFaithOnAllRanks,             // every block rank adds the replicated faithfulness term
  kAvgBlockReduce,              // each block averages its gradient reduction
  kGlobalSumAllReduceBackward,  // every CI rank adds the importance term of the all-reduced sum
  kDetachedGlobalResidual,      // the importance sum as local + detached residual: exact in
                                // first order, second-order cross-rank terms lost
  kPpgdBroadcastAllRanks,       // each PPGD rank returns the pool's summed V/U cotangent
};

}  // namespace magic::dist
