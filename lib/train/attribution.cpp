#include "lib/train/attribution.h"

#include <cmath>
#include <optional>

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/train/interrupt_hook.h"
#include "lib/train/memory_estimate.h"
#include "lib/train/progress_meter.h"
#include "lib/train/time_estimate.h"

namespace magic {

namespace {

// ‖θ_{t+1} − θ_t‖ over this rank's parameters, in double whatever the master dtype.
double update_norm(const TrainState& before, const TrainState& after) {
  double sum = 0;
  for (const auto& entry : before.params) {
    sum += (after.params.at(entry.name) - entry.tensor).to(at::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(sum);
}

// The training losses in nats a token, as the unigram entropy is: a mean over the batch's labels
// is one already, a sum of row means is one a row; a plain sum is a batch's (empty: not judged).
std::vector<double> losses_per_token(const RunConfig& config, std::vector<double> losses) {
  if (config.reduction == Reduction::kSum) return {};
  if (config.reduction == Reduction::kSumOfMeans) {
    for (double& loss : losses) loss /= static_cast<double>(config.batch_size);
  }
  return losses;
}

}  // namespace

Attribution run_attribution(const RunConfig& config, LmProblem problem, const AttributionOptions& options) {
  Attribution a{std::move(problem), {}, {}, std::nullopt, {}, std::nullopt};
  const LmProblem& p = a.problem;
  MagicOptions magic;
  magic.schedule = config.checkpoints;
  const CheckpointPlan plan = run_checkpoint_plan(config, options.replay_mode);
  if (config.checkpoints == CheckpointSchedule::kBudget) magic.budget_states = plan.states;
  magic.spill_dir = config.spill_dir;
  magic.resume_folder = options.resume_folder;
  magic.least_across_ranks = options.least_across_ranks;
  magic.per_query = options.per_query;
  magic.query_batch = options.query_batch;
  magic.retrace_per_query = options.retrace_per_query;
  magic.stop_on_non_finite = true;
  magic.replay_mode = options.replay_mode;
  const int64_t steps = p.step->num_steps();
  const int64_t replay_steps = steps * (options.per_query ? p.query->num_queries() : 1);
  // REPLAY's meter starts as training ends (the query gradient and every REPLAY step timed), or,
  // in a run resumed in REPLAY, with its first step.
  std::optional<ProgressMeter> training, replay;
  int64_t replayed = 0, replay_resumed = 0;
  const auto start_replay_meter = [&] {
    if (replay || !options.progress) return;
    replay.emplace("REPLAY", replay_steps, *options.progress, options.terminal);
    if (options.per_query) replay->made_of(str_cat(p.query->num_queries(), " queries x ", steps, " steps"));
    replay->resume_at(replay_resumed);
  };
  magic.on_resume = [&](const ResumePoint& at) {
    replayed = replay_resumed = at.replay_steps_done;
    if (!options.progress) return;
    *options.progress << "resuming: training from the checkpoint at step " << at.training_step << " of " << steps;
    if (at.replay_steps_done > 0)
      *options.progress << ", REPLAY after " << at.replay_steps_done << " of " << replay_steps << " steps";
    *options.progress << std::endl;
    if (training) training->resume_at(at.training_step);
  };
  a.training.total_steps = steps;
  magic.on_step = [&](int64_t t, const TrainState& before, const StepOutput& out) {
    // The launcher names a stalled rank's phase (progress.h).
    dist::set_phase(str_cat("training step ", t + 1, " of ", steps));
    // Watching costs one pass over the parameters; the loss is the step's own (lm_step.h).
    if (out.loss.defined()) {
      a.training.add(t, out.loss.item<double>(), update_norm(before, out.next),
                     config.optimizer.schedule.at(optimizer_count(before.opt)));
    }
    if (t + 1 == steps) a.training_warning = non_smooth_warning(a.training);
    interrupt_if_asked(RunPhase::kTraining, t);
    if (!training) return;
    training->update(t + 1);
    if (t + 1 == steps) {
      training->finish();
      if (a.training_warning) *options.progress << "magic-run: " << *a.training_warning << std::endl;
      start_replay_meter();  // REPLAY starts now: its first step is timed too
    }
  };
  // Every rank judges what the model learned (the sum over ranks is a collective); the speaking one prints it.
  const Unigram unigram = unigram_of(p.train->labels);
  magic.on_query_loss = [&](double query_loss) {
    at::Tensor losses = at::tensor(a.training.losses, at::kDouble);
    if (options.sum_across_ranks && losses.numel() > 0) options.sum_across_ranks(losses);
    const double* sums = losses.data_ptr<double>();
    a.learning =
        learning_figures(a.training, losses_per_token(config, {sums, sums + losses.numel()}), unigram, query_loss);
    a.learning.built_in_model = !config.model_folder.has_value();
    a.learning_warning = learned_little_warning(a.learning);
    if (a.learning_warning && options.progress) *options.progress << "magic-run: " << *a.learning_warning << std::endl;
  };
  magic.on_replay_step = [&](int64_t t, const StepVjp&) {
    dist::set_phase(str_cat("REPLAY at step ", t));
    interrupt_if_asked(RunPhase::kReplay, t);
    ++replayed;
    if (!options.progress) return;
    start_replay_meter();  // a run resumed in REPLAY trains no step
    replay->update(replayed);
    if (replayed == replay_steps) replay->finish();
  };
  // Every rank takes part in the calibration step's collectives; the speaking one prints it.
  const int64_t products = options.per_query ? p.query->num_queries() : 1;
  // A step that runs collectives takes its products one at a time (backward_through_each).
  const int64_t batch = p.step->runs_collectives() ? 1 : std::max<int64_t>(options.query_batch, 1);
  TimeEstimate time = estimate_time(*p.step, p.initial, p.weights, plan.recomputations, products, options.replay_mode,
                                    options.retrace_per_query ? (products + batch - 1) / batch : 1);
  time.add_retrainings(options.lds_retrainings);
  if (options.progress) {
    *options.progress << "estimated time: " << time.str() << std::endl;
    training.emplace("training", steps, *options.progress, options.terminal);  // its clock starts now
  }
  a.result = run_magic(*p.step, *p.query, p.initial, p.weights, magic);
  return a;
}

}  // namespace magic
