// The mutations planted in the two objects every MAGIC run is given (magic_pipeline.h): the step
// function, whose restore() REPLAY takes checkpoints through, and the query function, whose
// gradient starts REPLAY. Each wrapper forwards everything to the correct object but the one
// method its bug lives in; an empty or other mutation name gives the correct object back.
#pragma once

#include <memory>
#include <string>

#include "lib/optim/optimizer.h"
#include "lib/step/step_function.h"

namespace magic::checks {

// Whether `mutation` is planted here (and so nowhere else).
bool is_pipeline_mutation(const std::string& mutation);

// replay-restore-fresh-optimizer: restore() keeps the checkpoint's parameters and persistent state
// and starts a fresh `optimizer` state (a model-only load). replay-opt-cotangent-keeps-loss-scale:
// REPLAY's optimizer-state cotangents are not divided by the loss scale. replay-start-keeps-loss-scale:
// REPLAY starts from the loss-scaled query gradient. `inner` must outlive the result.
std::shared_ptr<const StepFunction> planted_step(const std::string& mutation, const StepFunction& inner,
                                                 std::shared_ptr<const Optimizer> optimizer);

// query-grad-scaled: the query gradient of the embeddings (tok_emb, pos_emb) times `dp`, as a second
// all-reduce over the dp replicas leaves it. `inner` must outlive the result.
std::shared_ptr<const QueryFunction> planted_query(const std::string& mutation, const QueryFunction& inner, int64_t dp);

}  // namespace magic::checks
