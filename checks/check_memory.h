// What a magic-check run will hold in memory, estimated from its settings before anything is
// built, so that a check too long for the machine is refused at once (exit 2, before any rank
// starts) instead of growing until the machine runs out (`--steps 100000` used to reach 23 GiB
// in 11 minutes). Almost everything a check holds grows with its steps:
//   references   the unrolled reference keeps every step's graph and states until its one
//                backward: a step's activations (memory_estimate.h's per-token count, in the
//                compute dtype) + kReferenceStateCopies states; a low-precision check runs it
//                twice (the policy's and the fp64 golden run), below fp32 three times (and the
//                fp32 pass's, run_check.h)
//   ranks        each rank keeps every step's rows (gradients, optimizer inputs and updates,
//                REPLAY's products and states, unsharded) for the comparison: kRankStateCopies
//                fp64 states per step, and a share of that for each planted mutation's run
//                (--bite gates a mutation's levels, so its rows are fewer); below fp32 one
//                more run's for the fp32 pass
// Both constants come from measured peak memory (docs/benchmarks.md, "magic-check memory"); the
// per-process LibTorch footprint (about 160 MiB) is not counted.
#pragma once

#include <cstdint>
#include <string>

#include "checks/check_settings.h"

namespace magic::checks {

struct CheckMemoryEstimate {
  int64_t steps = 0;
  int64_t references = 1;     // 2 under a low-precision policy (its fp64 golden run), 3 below fp32
  double reference_step = 0;  // bytes one reference run holds per step (policy's; golden's added)
  int64_t ranks = 1;
  double rank_step = 0;  // bytes one rank holds per step, every run of the check together
  double per_step() const { return reference_step + static_cast<double>(ranks) * rank_step; }
  double total() const { return static_cast<double>(steps) * per_step(); }
  // "31.2 GiB (4000 steps of 8.0 MiB: the reference 3.9 MiB, 2 ranks 2.0 MiB each)"
  std::string str() const;
};

// `mutation_runs`: the planted runs beside the clean one (--bite: the bite plan's; --mutate: 1).
CheckMemoryEstimate estimate_check_memory(const CheckSettings& settings, int64_t mutation_runs);

// InputError naming the estimate, what is available and the most steps that fit, when the
// estimate exceeds `available` bytes (0: unknown, nothing is refused).
void require_check_memory(const CheckSettings& settings, const CheckMemoryEstimate& estimate, int64_t available);

}  // namespace magic::checks
