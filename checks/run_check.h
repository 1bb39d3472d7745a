// One magic-check run on this rank: the distributed pipeline for the clean run, the one planted
// mutation (--mutate) or every mutation that applies (--bite); then, on rank 0, the reference,
// the comparison rows and the bite verdicts.
#pragma once

#include <string>

#include "checks/check_settings.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/io/report.h"

namespace magic::checks {

enum class CheckMode { kPlain, kMutate, kBite };

struct CheckRequest {
  CheckSettings settings;
  CheckMode mode = CheckMode::kPlain;
  std::string mutation;  // kMutate only
};

// Every rank calls it. Rank 0 gets the full report; other ranks an empty one (exit code 0).
CheckReport run_check(const CheckRequest& request, const dist::Runtime& runtime);

}  // namespace magic::checks
