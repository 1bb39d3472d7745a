// One magic-run attribution: the config's problem (built on one process or as this rank's share of
// a mesh), trained with checkpoints, REPLAYed, with progress for a person watching
// and every non-finite value stopping the run (finite_guard.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <ostream>

#include "lib/train/learning_health.h"
#include "lib/train/magic_pipeline.h"
#include "lib/train/run_config.h"
#include "lib/train/training_health.h"

namespace magic {

struct AttributionOptions {
  bool per_query = false;
  int64_t query_batch = 1;           // per query: products in one backward pass (magic_pipeline.h)
  bool retrace_per_query = false;    // per query: each step traced again for each batch (magic_pipeline.h)
  std::ostream* progress = nullptr;  // null: no progress shown (ranks other than 0)
  bool terminal = false;             // progress as a bar redrawn in place
  // This rank's folder of a resumable run (run_folder.h) and the all-ranks minimum that makes
  // every rank resume from the same point (magic_pipeline.h).
  std::optional<std::string> resume_folder;
  std::function<int64_t(int64_t)> least_across_ranks;
  // Sums a tensor over every rank in place (null on one process): the training losses a rank sees
  // are its share of the batch's.
  std::function<void(at::Tensor&)> sum_across_ranks;
  ReplayMode replay_mode = ReplayMode::kSequential;  // replay_mode.h
  int64_t lds_retrainings = 0;                       // --validate lds's, for the time estimate (lds.h)
};

struct Attribution {
  LmProblem problem;
  MagicResult result;
  TrainingTrace training;                       // each watched step's loss and update (training_health.h)
  std::optional<std::string> training_warning;  // set when training looked non-smooth
  LearningFigures learning;                     // the losses against the unigram entropy (learning_health.h)
  std::optional<std::string> learning_warning;  // set when the model learned too little
};

// `problem`: build_lm_problem(config, parallelism). A non-smooth run's warning goes to
// `options.progress` as soon as training ends, and the learned-too-little one as soon as the query
// loss is known: both before REPLAY, which takes longer.
Attribution run_attribution(const RunConfig& config, LmProblem problem, const AttributionOptions& options);

}  // namespace magic
