// What a magic-check run checks: the layout, the workload and its size, the dtype, the
// reduction convention and which levels to compare. Filled from the command line.
#pragma once

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/core/precision_policy.h"
#include "lib/core/run_device.h"
#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/runtime/group.h"
#include "lib/distributed/runtime/topology.h"
#include "lib/train/run_config.h"

namespace magic::checks {

// The compared levels, in the order a bug shows up in them (docs/magic-check.md has the map of
// which stage of the pipeline each row sees):
//   grad          the reduced gradient before clipping, at the reference's state of every step
//   optimizer     what the optimizer consumes and does, one step from the reference's full state:
//                 the clip coefficient, the gradient after unscaling and clipping, the update
//   query_grad    ∂Q/∂θ_N, per parameter;   hvp   ∇²L v at θ_0 and θ_N
//   replay        REPLAY's restored and recomputed states against training's (bit for bit)
//   final_params, scores
enum class Level { kGrad, kOptimizer, kQueryGrad, kHvp, kReplay, kFinalParams, kScores };
const std::vector<Level>& all_levels();
std::string level_name(Level level);
// "grad,hvp,scores"; InputError listing the valid names.
std::vector<Level> parse_levels(const std::string& list);
// Position of a level name in the order above (for "the first level that fails").
int level_rank(const std::string& name);

struct CheckSettings {
  dist::TopologySpec topology = dist::TopologySpec::parse("dp=1");
  int64_t steps = 4;
  PrecisionPolicy precision;  // --dtype: fp64 | fp32 | bf16 | fp16 (precision_policy.h)
  dist::Convention convention = dist::Convention::kSum;
  std::vector<Level> levels = all_levels();
  uint64_t seed = 0;
  std::string optimizer = "adamw";  // sgd | adam | adamw
  std::string checkpoints = "sqrt";
  // 0: mesh (mb + 2) x dp + 1, 3 x dp + 1 without mb (uneven shards and micro-batches); three-pool
  // 4 x lcm(pool sizes)
  int64_t batch_size = 0;
  int64_t documents = 12;
  int64_t max_len = 16;
  // --label-smoothing: ε in [0, 1) of the lm workload's training loss (lm_loss.h); with --config, the
  // config's training.label_smoothing.
  double label_smoothing = 0.0;
  // Whether the lm reference keeps its trace records for the first divergence (first_divergence.h).
  // They go to the process's one sink: only a process that computes the reference on one thread
  // (the magic-check tool) may, not rank threads that each compute their own.
  bool record_reference = false;
  std::string fixtures_dir = MAGIC_FIXTURES_DIR;  // the KJV text the workload trains on
  // --model: the lm workload's architecture, weights and tokenizer from this model folder
  // (hf_model_folder.h) instead of its own small GPT; "" for the latter.
  std::string model_folder;
  // --config: check this magic-run config (its model, data, optimizer, schedule, reduction, weights,
  // clipping, dtype) for the first `steps` steps instead of the built-in workload. from_run_config
  // copies what it fixes into the fields above.
  std::shared_ptr<const RunConfig> run_config;
  dist::BackendKind backend = dist::BackendKind::kGloo;
  // --device: where the distributed run computes (run_device.h); the reference stays on the host.
  DeviceKind device = DeviceKind::kCpu;
  std::chrono::milliseconds timeout = std::chrono::seconds(60);

  int64_t global_batch() const;
  // The workload of the topology's family: lm (a small GPT) on mesh layouts, spd (a small
  // decomposition) on three-pool layouts. Each family has exactly one, so there is no flag.
  std::string resolved_workload() const;
  // Decomposed sites of the three-pool workload's target MLP: every block owns at least one.
  int64_t spd_sites() const { return std::max<int64_t>(2, topology.n_blocks()); }
  // The optimizer both the distributed pipeline and the reference use (torchopt semantics).
  nlohmann::json optimizer_json() const;
  bool wants(Level level) const;
  // Whether any level after `level` is wanted (every level after grad needs the training run).
  bool wants_after(Level level) const;
  // Whether the training run is needed (every level after optimizer), and REPLAY (replay, scores).
  bool needs_training() const { return wants_after(Level::kOptimizer); }
  bool needs_replay() const { return wants(Level::kReplay) || wants(Level::kScores); }
  // The wanted levels up to and including `last` (a --bite mutation's run computes only those:
  // later levels cannot change its first failing level).
  std::vector<Level> levels_through(const std::string& last) const;
  // Throws InputError for values out of range, and for a batch the workload's data cannot fill
  // (naming the flag to change), before any rank starts.
  void validate() const;
};

// The fp32 pass of a check below fp32 (bf16, fp16; docs/magic-check.md, "Mixed precision"): the
// same layout, data and code path with the compute dtype fp32 and the rest of the policy kept (fp32
// master weights and reduction, the loss scale). Rows that go unjudged in the check's own dtype are
// judged again there, where the bounds are tight. None at fp32 and above.
std::optional<CheckSettings> fp32_pass_settings(const CheckSettings& settings);

// Settings for checking `config` (magic-check --config): its dtype, batch, max_len, optimizer,
// checkpoints and seed, `steps` capped at the run's own steps. The learning-rate schedule stays the
// full run's (it was resolved over config.steps), so the checked steps are the run's first steps.
void apply_run_config(CheckSettings& settings, std::shared_ptr<const RunConfig> config);

}  // namespace magic::checks
