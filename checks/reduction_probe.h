// The gradient reduction's own precision (docs/magic-check.md, "Mixed precision", reduction rows): under a
// low-precision policy a reduction done in a narrower dtype than the policy says, or a gradient
// rounded on its way into the sum, is lost in the rounding noise of every comparison against the
// reference; compared with the exact sum of the very terms it added, it is not.
//   partial_r   rank r's local gradient of S·L: the cotangent reaching the parameters where they
//               enter the collectives (Parallelism::enter), recorded as the backward passes it;
//               on tp a rank's piece of a split parameter
//   exact       Σ_r partial_r in fp64 (error ~1e-16, far below any policy's bound) over the R
//               ranks the parameter's reduction adds (Parallelism::sum_over_reduction_groups: the
//               batch group, times tp for a parameter summed over tp under sp), joined to whole shape
//   the pipeline's reduced gradient g must satisfy, entry by entry,
//               |g − c·exact| <= c·(γ_{R−1}(u_reduce) + 2·u_master)·(Σ_r|partial_r| + R·η_reduce)
//   with c = 1/S (SUM) or 1/(S·dp·cp) (AVG), γ_n(u) = n·u/(1 − n·u) the worst-case bound of a
//   sum of n + 1 terms in any order, 2·u_master for the cast back to master and the AVG divide,
//   η the dtype's smallest subnormal (underflow of partial sums).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checks/pipeline_outputs.h"
#include "lib/step/parallelism.h"

namespace magic::checks {

// A rank's local gradient of one parameter, over the backwards of one evaluation (one per
// micro-batch), in fp64: Σ_m p_m and Σ_m |p_m|.
struct Partial {
  at::Tensor sum, magnitude;
};

// Where the probe records: the local gradient of every parameter, by name, of the backwards that
// ran while armed. Shared by the tapped parallelism and the check that reads it.
class ReductionTap {
 public:
  void arm();
  bool armed() const;
  // A parameter entered (its partial starts at zeros of its shape: a backward may never reach it).
  void entered(const std::string& name, const at::Tensor& parameter);
  void record(const std::string& name, const at::Tensor& cotangent);
  // The partials of every parameter entered while armed; disarms.
  std::map<std::string, Partial> take();

 private:
  mutable std::mutex mutex_;
  bool armed_ = false;
  std::map<std::string, Partial> partials_;
};

// `inner` with its enter() tapped while `tap` is armed (identity forward; the backward records the
// cotangent and passes it on unchanged). Every other method is inner's.
std::shared_ptr<const Parallelism> tapped_parallelism(std::shared_ptr<const Parallelism> inner,
                                                      std::shared_ptr<ReductionTap> tap);

// Whether a check run has reduction rows: the lm workload under a low-precision policy (the
// three-pool workload reduces in the master dtype only, and fp64 has no finer dtype to sum in).
bool has_reduction_rows(const CheckSettings& settings);
// "tok_emb" -> "tok_emb[reduction]"
std::string reduction_row_name(const std::string& gradient);

// Appends one grad-level output per parameter: its reduced gradient of every step, concatenated
// as the grad rows are, with the exact sums of the same steps as its reduction terms.
void append_reduction_outputs(PipelineOutputs& out, const std::vector<TensorTree>& step_grads,
                              const std::vector<std::map<std::string, ReductionTerms>>& step_sums);

// The exact sum and magnitude of each parameter's partials over its reduction group, whole-shaped,
// times `c`: Σ_r Σ_m p_rm and Σ_r Σ_m |p_rm| in fp64, the step's M micro-batches each reduced on
// its own and then accumulated (reduction_row.h). Every rank calls it (collectives).
std::map<std::string, ReductionTerms> exact_reductions(const Parallelism& parallelism,
                                                       const std::map<std::string, Partial>& partials, double c,
                                                       int64_t micro_batches);

}  // namespace magic::checks
