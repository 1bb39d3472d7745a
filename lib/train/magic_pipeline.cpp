#include "lib/train/magic_pipeline.h"

#include <chrono>

#include "lib/core/run_device.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/trace/trace_sink.h"
#include "lib/train/checkpoint_plan.h"
#include "lib/train/finite_guard.h"
#include "lib/train/replay_backward.h"
#include "lib/train/replay_journal.h"

namespace magic {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

CheckpointStore make_store(const StepFunction& step, const MagicOptions& options) {
  CheckpointPlan plan = plan_checkpoints(options.schedule, step.num_steps(), options.budget_states,
                                         options.resume_folder || options.spill_dir, options.replay_mode);
  CheckpointStore store = options.resume_folder
                              ? CheckpointStore::persistent(std::move(plan.steps), *options.resume_folder)
                              : CheckpointStore(std::move(plan.steps), options.spill_dir);
  store.set_segment_slots(plan.segment_slots);
  return store;
}

int64_t least(const MagicOptions& options, int64_t value) {
  return options.least_across_ranks ? options.least_across_ranks(value) : value;
}

// REPLAY steps taken (over all queries) before progress p, the segments done (replay_journal.h).
int64_t replay_steps_before(int64_t progress, const std::vector<int64_t>& checkpoints, int64_t steps, int64_t queries) {
  const int64_t segments = static_cast<int64_t>(checkpoints.size());
  return progress > 0 ? queries * (steps - checkpoints[segments - progress]) : 0;
}

}  // namespace

MagicResult run_magic(const StepFunction& step, const QueryFunction& query, const TrainState& initial,
                      const at::Tensor& w, const MagicOptions& options) {
  MagicResult result;
  CheckpointStore store = make_store(step, options);
  store.place_loaded_on(device_of(initial.params));
  // A resumed run trains on from the latest checkpoint every rank holds (s_N is recomputed from
  // the last one: REPLAY needs ∂Q/∂θ_N).
  const int64_t resume_step = options.resume_folder ? least(options, store.latest_saved()) : -1;
  const int64_t replayed_queries = options.per_query ? query.num_queries() : 1;
  std::optional<ReplayJournal> journal;
  int64_t replay_progress = 0;
  if (options.resume_folder) {
    journal.emplace(*options.resume_folder, static_cast<int64_t>(store.steps().size()), replayed_queries);
    replay_progress = least(options, journal->latest());
  }
  if (resume_step >= 0 && options.on_resume) {
    options.on_resume(
        {resume_step, replay_steps_before(replay_progress, store.steps(), step.num_steps(), replayed_queries)});
  }
  auto start = std::chrono::steady_clock::now();
  StepObserver observer = options.on_step;
  if (options.stop_on_non_finite) {
    observer = [&options](int64_t t, const TrainState& before, const StepOutput& out) {
      const std::string where = str_cat("training step ", t);
      require_finite(out.grads.with_prefix("gradient of "), where);
      require_finite(out.next.params.with_prefix("parameter "), where);
      if (options.on_step) options.on_step(t, before, out);
    };
  }
  result.final_state = resume_step >= 0
                           ? train_forward_from(step, resume_step, step.restore(store.load(resume_step), resume_step),
                                                w, &store, observer)
                           : train_forward(step, initial, w, &store, observer);
  result.train_seconds = seconds_since(start);
  result.checkpoints = store.count();
  result.checkpoint_bytes = store.bytes();
  {
    at::NoGradGuard no_grad;
    const at::Tensor loss = query.loss(result.final_state.params);
    if (options.stop_on_non_finite) require_finite(loss, "the query loss", "after training");
    result.query_loss = loss.item<double>();
  }
  if (options.on_query_loss) options.on_query_loss(result.query_loss);

  {
    dist::PhaseScope phase("query gradient");
    result.query_gradient = query.gradient(result.final_state.params);
    // ∂Q/∂θ_N, where REPLAY starts (recorded here, so that a run that stops before REPLAY has it).
    if (tracing())
      trace_parameter_tree(result.query_gradient, {"", "gradient", "query", "first", -1, "", {}}, step.trace_layout());
    if (options.stop_on_non_finite) require_finite(result.query_gradient.with_prefix("dQ/d"), "query gradient");
  }

  if (!options.replay) return result;
  start = std::chrono::steady_clock::now();
  ReplayObserver replay_observer = options.on_replay_step;
  if (options.stop_on_non_finite) {
    replay_observer = [&options](int64_t t, const StepVjp& vjp) {
      const std::string where = str_cat("REPLAY step ", t);
      require_finite(vjp.cotangent.params.with_prefix("dQ/d"), where);
      require_finite(vjp.dw, "its contribution to the scores", where);
      if (options.on_replay_step) options.on_replay_step(t, vjp);
    };
  }
  ReplayBackward replay(step, store, w, replay_observer, options.replay_mode);
  // Every query in one pass (replay_backward.h): each step recomputed and traced once.
  std::vector<TensorTree> dq_dparams;
  if (options.per_query) {
    for (int64_t j = 0; j < query.num_queries(); ++j)
      dq_dparams.push_back(query.gradient(result.final_state.params, j));
  } else {
    dq_dparams.push_back(result.query_gradient);
  }
  // Taken up from the journal where an earlier process began or finished it; this rank's share.
  std::optional<ReplayResume> from;
  if (journal && replay_progress > 0) from = journal->resume(replay_progress);
  SegmentObserver on_segment;
  if (journal) on_segment = [&](const ReplayResume& after) { journal->record(after); };
  const QueryProducts how{static_cast<size_t>(std::max<int64_t>(options.query_batch, 1)), options.retrace_per_query};
  const std::vector<ReplayResult> replayed = replay.run_each(dq_dparams, how, from ? &*from : nullptr, on_segment);
  for (const ReplayResult& r : replayed)
    result.peak_states_held = std::max(result.peak_states_held, r.peak_states_held);
  if (options.per_query) {
    std::vector<at::Tensor> rows;
    for (const ReplayResult& r : replayed) rows.push_back(step.assemble_weight_gradient(r.dw));
    result.scores = at::stack(rows);
  } else {
    result.scores = step.assemble_weight_gradient(replayed.front().dw);
    // The scores as assembled from every rank's REPLAY: the same on every rank.
    if (tracing()) {
      trace_point(result.scores, [&] {
        return TraceRecord{"scores", "score", "replay", "metagradient", -1, "", step.trace_layout().replicated()};
      });
    }
  }
  result.replay_seconds = seconds_since(start);
  if (options.stop_on_non_finite) require_finite(result.scores, "scores", "after REPLAY");
  return result;
}

}  // namespace magic
