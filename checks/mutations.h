// The mutation catalog (docs/magic-check.md, "The catalog"): each mutation plants one known bug in the
// distributed pipeline and states its signature, the first level that must fail (in the order
// grad, query_grad, hvp, final_params, scores) and the factor the diagnosis must name there
// ("" where the error is not a scaling).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checks/check_settings.h"
#include "lib/compare/check_row.h"
#include "lib/distributed/runtime/topology.h"
#include "lib/io/report.h"

namespace magic::checks {

// What a precision mutation needs of the run's precision policy to exist.
enum class PrecisionNeed {
  kNone,
  kLowPrecision,        // compute dtype below the master dtype (master weights exist)
  kLossScale,           // loss_scale >= 2
  kReduceInMaster,      // the policy reduces in the master dtype, which is not the compute dtype
  kFp16,                // fp16 compute
  kResolvesTinyErrors,  // fp32 or finer: an error of 1e-4 to 1e-3 is within bf16's and fp16's rounding
};

// "compute below master (bf16, fp16)", "loss_scale >= 2 (fp16)", ...
std::string precision_need_text(PrecisionNeed need);

struct Mutation {
  std::string name;  // also selects its planted variant (planted_variants.h)
  std::string description;
  std::string expected_level;
  std::string expected_factor;
  // None: every layout. The precision mutations are the mesh's: the three-pool workload runs fp64
  // and fp32 only.
  std::optional<dist::TopologyFamily> family;
  // Sizes the layout must have for the bug to exist and show its factor: ("n_ci", 2) is
  // n_ci >= 2; in `at_most`, ("cp", 1) is cp <= 1. Sizes are the topology's keys and, on a
  // mesh, "replicas" (dp / fsdp) and "holders" (ranks holding the same shard: dp / fsdp * cp).
  std::vector<std::pair<std::string, int64_t>> at_least;
  std::vector<std::pair<std::string, int64_t>> at_most = {};
  PrecisionNeed precision_need = PrecisionNeed::kNone;
  // A clip-norm bug exists only where the run clips (the built-in workloads always do; a --config
  // without optimizer.clip_norm does not).
  bool needs_clipping = false;
  // A restore bug shows only where REPLAY restores a checkpoint after step 0 (2 steps or more).
  bool needs_later_checkpoint = false;
  // A label-smoothing bug shows only where the training loss is smoothed.
  bool needs_label_smoothing = false;
  // The bug ends the run with a named rank failure (exit 1), not with rows: --mutate checks it,
  // --bite skips it (a failed run leaves no group to go on with).
  bool ends_the_run = false;
  // A tied embedding's bug exists only where the head is tied and pp > 1 (its two copies).
  bool needs_tied_head = false;
};

// What a mutation may need of the checked run beyond its layout and precision.
struct RunTraits {
  bool clipping = true;          // the run clips its gradient
  bool later_checkpoint = true;  // REPLAY restores a checkpoint after step 0
  bool label_smoothing = false;  // the training loss is smoothed
  bool tied_head = false;        // the model's head is its token embedding
};
// The traits of the run `settings` check: both built-in workloads clip (their clip norms are chosen
// so that the clip fires, lm_pipelines.h); a --config clips where it says so.
RunTraits run_traits(const CheckSettings& settings);

// The sizes factors are named after: the topology's, and "loss_scale" where it is >= 2.
std::vector<std::pair<std::string, int64_t>> factor_sizes(const dist::TopologySpec& topology,
                                                          const PrecisionPolicy& precision);

// "" when `m` applies to `topology`, else why not: "needs n_per_block >= 2 (n_per_block=1 here)".
std::string unmet_requirement(const Mutation& m, const dist::TopologySpec& topology,
                              const PrecisionPolicy& precision = {}, RunTraits run = {});

const std::vector<Mutation>& mutation_catalog();

// What --bite runs on a topology and checked levels, and what it leaves out and why: every
// mutation of the topology's family is in one list or the other.
struct BitePlan {
  std::vector<Mutation> run;
  std::vector<BiteSkip> skipped;
};
BitePlan plan_bite(const dist::TopologySpec& topology, const std::vector<Level>& levels,
                   const PrecisionPolicy& precision = {}, RunTraits run = {});

// InputError listing the catalog when `name` is unknown or does not apply to the topology, or
// naming both levels when the level the mutation must fail at is not among `levels`.
const Mutation& find_mutation(const std::string& name, const dist::TopologySpec& topology,
                              const std::vector<Level>& levels = all_levels(), const PrecisionPolicy& precision = {},
                              RunTraits run = {});

// Caught when the first failing level is the expected one and, if a factor is expected, a
// failing row at that level has a scale equal to that factor's value on `topology` (exactly, or
// as ≈ on uneven shards) and the expected name is among the names of that value. The observed
// level is the first that failed ("" if none); the observed factor lists every name the row's
// scale matches ("x n_per_block = x n_ppgd" where sizes coincide: then factor_distinct is false).
BiteOutcome judge_mutation(const Mutation& mutation, const dist::TopologySpec& topology,
                           const std::vector<CheckRow>& rows, const PrecisionPolicy& precision = {});

}  // namespace magic::checks
