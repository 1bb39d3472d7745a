// magic-run's plan: everything another implementation needs to replay exactly the run magic-run
// attributes, and so to recompute its scores independently (docs/plan-format.md, every field).
//   plan.json            format and version, model, loss, optimizer with the learning rate of
//                        every step, training order, checkpoints, queries, scores, the files
//   init.safetensors     θ_0, named as the model names its parameters
//   batches.safetensors  every step's input ids, targets, example of each row, divisors; w
//   queries.safetensors  the query chunks, their targets and documents
// The plan is read off the problem magic-run built (the batches LmStep consumes, the initial state
// it trains from), so it describes the run and not a re-derivation of it. The folder is written
// whole (lib/io/atomic_folder.h).
#pragma once

#include <string>

#include "lib/train/run_config.h"

namespace magic {

constexpr const char* kPlanFormat = "magic-plan";
constexpr int kPlanVersion = 1;

struct PlanOptions {
  bool per_query = false;   // scores [Q, N(, T)]: one REPLAY per query
  std::string config_path;  // shown in plan.json, for a reader to find the run's config
};

// InputError naming what the plan cannot state: a mixed-precision policy (compute differs from
// master: casts, loss scaling and CPU fp32 fallbacks are not part of the format). Called once the
// config is loaded, before anything is built.
void require_plan_expressible(const RunConfig& config, const std::string& flag);

// Writes the plan of `problem` (build_lm_problem(config) on one process) into `dir`, which must be
// new or empty (require_new_folder). InputError when it cannot be written; nothing is left then.
void export_plan(const std::string& dir, const RunConfig& config, const LmProblem& problem, const PlanOptions& options);

}  // namespace magic
