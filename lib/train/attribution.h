// One magic-run attribution: the config's problem (built on one process or as this rank's share of
// a mesh), trained with checkpoints, REPLAYed, with progress for a person watching
// and every non-finite value stopping the run (finite_guard.h).
#pragma once

#include <memory>
#include <ostream>

#include "lib/train/magic_pipeline.h"
#include "lib/train/run_config.h"

namespace magic {

struct AttributionOptions {
  bool per_query = false;
  std::ostream* progress = nullptr;  // null: no progress shown (ranks other than 0)
  bool terminal = false;             // progress as a bar redrawn in place
};

struct Attribution {
  LmProblem problem;
  MagicResult result;
};

// `problem`: build_lm_problem(config, parallelism).
Attribution run_attribution(const RunConfig& config, LmProblem problem, const AttributionOptions& options);

}  // namespace magic
