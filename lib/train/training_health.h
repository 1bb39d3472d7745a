// Whether a training run looked smooth enough for first-order scores to predict retraining.
// MAGIC's scores are exact derivatives of the run, but a chaotic run (the loss jumping, the
// parameters lurching) is one whose derivatives say little about retraining on other data, so
// magic-run warns and points to --validate lds. The criterion (docs/magic-run.md):
//   a loss spike:        step t's training loss > kLossSpike × the lowest loss of the steps before it;
//   an update-norm jump: ‖θ_{t+1} − θ_t‖ / lr_t > kUpdateJump × the median of that ratio over the
//                        steps before it (at least kUpdateHistory of them; steps with lr 0 are skipped).
// Dividing by the step's learning rate keeps a warmup or decay from reading as a jump.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace magic {

inline constexpr double kLossSpike = 1.5;
inline constexpr double kUpdateJump = 10.0;
inline constexpr int64_t kUpdateHistory = 3;

struct TrainingTrace {
  int64_t total_steps = 0;
  // One entry a step watched (a resumed run sees only the steps after its checkpoint).
  std::vector<int64_t> steps;        // 0-based step index
  std::vector<double> losses;        // the step's training loss (on a distributed run, rank 0's share)
  std::vector<double> update_norms;  // ‖θ_{t+1} − θ_t‖ (rank 0's part of θ on a sharded or tp run)
  std::vector<double> learning_rates;

  void add(int64_t step, double loss, double update_norm, double learning_rate);
};

struct TrainingHealth {
  std::vector<int64_t> loss_spikes;   // 0-based steps whose loss spiked
  std::vector<int64_t> update_jumps;  // 0-based steps whose update norm jumped
  // The worst of each: the step, its value and what it was compared with.
  int64_t worst_loss_step = -1, lowest_loss_step = -1;
  double worst_loss = 0, lowest_loss = 0;
  int64_t worst_jump_step = -1;
  double worst_jump = 0;  // the ratio to the running median

  bool smooth() const { return loss_spikes.empty() && update_jumps.empty(); }
};

TrainingHealth judge_training(const TrainingTrace& trace);

// One line for a person: what was seen, where, and what to do; nullopt for a smooth run.
std::optional<std::string> non_smooth_warning(const TrainingTrace& trace);

}  // namespace magic
