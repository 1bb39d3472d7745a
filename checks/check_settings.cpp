#include "checks/check_settings.h"

#include <algorithm>
#include <numeric>

#include "checks/lm_pipelines.h"
#include "lib/core/dtype.h"
#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/pools/three_pool_layout.h"
#include "lib/train/bridged_lm.h"
#include "lib/train/distributed_lm.h"

namespace magic::checks {

const std::vector<Level>& all_levels() {
  static const std::vector<Level> levels{Level::kGrad,   Level::kOptimizer,   Level::kQueryGrad, Level::kHvp,
                                         Level::kReplay, Level::kFinalParams, Level::kScores};
  return levels;
}

std::string level_name(Level level) {
  switch (level) {
    case Level::kGrad:
      return "grad";
    case Level::kOptimizer:
      return "optimizer";
    case Level::kQueryGrad:
      return "query_grad";
    case Level::kHvp:
      return "hvp";
    case Level::kReplay:
      return "replay";
    case Level::kFinalParams:
      return "final_params";
    case Level::kScores:
      return "scores";
  }
  return "?";
}

int level_rank(const std::string& name) {
  const auto& levels = all_levels();
  for (size_t i = 0; i < levels.size(); ++i) {
    if (level_name(levels[i]) == name) return static_cast<int>(i);
  }
  return static_cast<int>(levels.size());
}

std::vector<Level> parse_levels(const std::string& list) {
  std::vector<Level> out;
  std::vector<std::string> names;
  for (Level l : all_levels()) names.push_back(level_name(l));
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto it = std::find(names.begin(), names.end(), item);
    if (it == names.end()) {
      throw InputError(
          str_cat("--checks: unknown level '", item, "'; expected a comma-separated list of ", join(names, ", ")));
    }
    out.push_back(all_levels()[it - names.begin()]);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

namespace {

std::string default_batch_formula(const dist::TopologySpec& topology) {
  if (topology.is_bridge()) return "3 x max(enc dp, lm dp)";
  return topology.mb() > 1 ? "(mb + 2) x dp + 1" : "3 x dp + 1";
}

}  // namespace

int64_t CheckSettings::global_batch() const {
  if (batch_size > 0) return batch_size;
  // A bridge splits the batch evenly over both sides' dp (bridge_topology.h, check_batch).
  if (topology.is_bridge()) return 3 * std::max(topology.bridge().encoder.dp, topology.dp());
  // Uneven shards, and with mb > 1 uneven micro-batches: every replica gets mb + 2 or mb + 3 rows.
  if (topology.family() == dist::TopologyFamily::kMesh) return (topology.mb() + 2) * topology.dp() + 1;
  return 4 * std::lcm(std::lcm(topology.n_ci(), topology.n_per_block()), topology.n_ppgd());
}

std::string CheckSettings::resolved_workload() const {
  return topology.family() == dist::TopologyFamily::kMesh ? "lm" : "spd";
}

nlohmann::json CheckSettings::optimizer_json() const {
  nlohmann::json j = {{"name", optimizer}, {"lr", optimizer == "sgd" ? 0.1 : 0.01}, {"weight_decay", 0.01}};
  if (optimizer == "sgd") {
    j["momentum"] = 0.9;
  } else {
    j["eps_root"] = 1e-10;
  }
  j["schedule"] = {{"name", "cosine"}, {"warmup_steps", steps > 1 ? 1 : 0}};
  return j;
}

bool CheckSettings::wants(Level level) const {
  return std::find(levels.begin(), levels.end(), level) != levels.end();
}

std::optional<CheckSettings> fp32_pass_settings(const CheckSettings& s) {
  if (unit_roundoff(s.precision.compute) <= unit_roundoff(c10::kFloat)) return std::nullopt;
  CheckSettings fp32 = s;
  fp32.precision.compute = c10::kFloat;
  fp32.precision.reduce = s.precision.master;
  return fp32;
}

bool CheckSettings::wants_after(Level level) const {
  return std::any_of(levels.begin(), levels.end(), [&](Level l) { return l > level; });
}

std::vector<Level> CheckSettings::levels_through(const std::string& last) const {
  std::vector<Level> out;
  for (Level l : levels) {
    if (level_rank(level_name(l)) <= level_rank(last)) out.push_back(l);
  }
  return out;
}

void CheckSettings::validate() const {
  const std::string w = resolved_workload();
  if (steps < 1) throw InputError(str_cat("--steps: expected an integer >= 1, got ", steps));
  if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
    throw InputError(str_cat("--optimizer: unknown optimizer '", optimizer, "'; expected one of sgd, adam, adamw"));
  }
  if (batch_size < 0) throw InputError(str_cat("--batch: expected an integer >= 1, got ", batch_size));
  if (!(label_smoothing >= 0.0 && label_smoothing < 1.0)) {
    throw InputError(str_cat("--label-smoothing: expected a number in [0, 1), got ", label_smoothing));
  }
  if (w == "spd" && label_smoothing != 0.0) {
    throw InputError(
        "--label-smoothing: the three-pool workload (a decomposition) has no language-model loss to smooth");
  }
  if (w == "spd" && convention == dist::Convention::kAvg) {
    throw InputError(
        "--convention avg: the three-pool workload reduces with SUM throughout (plant AVG with "
        "--mutate avg-ci-reduce or avg-block-reduce)");
  }
  if (w == "spd" && precision.reduce != precision.master) {
    throw InputError(str_cat("--reduce-dtype ", dtype_name(precision.reduce),
                             ": the three-pool workload sums each pool's gradient in the master dtype (",
                             dtype_name(precision.master), "); a compute-dtype reduction is checked on mesh layouts"));
  }
  require_device(device, "--device cuda");
  if (w == "spd" && device != DeviceKind::kCpu) {
    throw InputError(str_cat("--device cuda: the three-pool workload (", topology.str(),
                             ") computes on the host only; mesh layouts run on a GPU (docs/gpu.md)"));
  }
  if (backend == dist::BackendKind::kNccl) {
    if (device != DeviceKind::kCuda) {
      throw InputError("--backend nccl: NCCL moves GPU memory, and the check's device is cpu; add --device cuda");
    }
    require_gpu_per_rank(topology.world_size(), cuda_devices(), "--topology " + topology.str());
  }
  if (w == "spd") {
    const dist::ThreePoolLayout layout(topology, spd_sites());
    layout.check_batch(global_batch(), batch_size > 0 ? "--batch" : "the default batch");
  }
  if (w == "lm" && 2 * topology.cp() > max_len) {
    throw InputError(str_cat(
        "--topology ", topology.str(), ": cp=", topology.cp(), " cuts each sequence into 2*cp = ", 2 * topology.cp(),
        " chunks, but the lm workload's sequences have ", max_len, " positions; use cp <= ", max_len / 2));
  }
  if (topology.is_bridge() && convention == dist::Convention::kAvg) {
    throw InputError(str_cat("--convention avg: a bridge layout (", topology.str(),
                             ") is checked under SUM: the encoder's gradient sums the language model's ranks, whose "
                             "AVG divides by the language model's dp x cp, not the encoder's dp"));
  }
  if (topology.is_bridge()) {
    const RunConfig unclipped = lm_unclipped_config(*this);
    require_bridge_fits(topology, unclipped.model, unclipped.encoder ? &*unclipped.encoder : nullptr, global_batch(),
                        run_config       ? "the config's training.batch_size"
                        : batch_size > 0 ? "--batch"
                                         : str_cat("the default batch (", default_batch_formula(topology), ")"));
  }
  // Before the data and weights are read: the model's config alone says whether tp can split it.
  if (w == "lm" && topology.tp() > 1) require_tensor_parallel_fits(topology, lm_unclipped_config(*this).model);
  // (Only where they can refuse: the workload's config is made after the flags are judged.)
  if (w == "lm" && (topology.pp() > 1 || topology.ring())) {
    const GptConfig model = lm_unclipped_config(*this).model;
    require_pipeline_fits(topology, model);
    require_ring_fits(topology, model, run_config ? "the config's model" : "the workload's");
  }
  if (w == "lm") {
    const int64_t examples = lm_training_examples(*this);
    if (global_batch() > examples) {
      throw InputError(str_cat(batch_size > 0 ? "--batch " + std::to_string(batch_size)
                                              : str_cat("the default batch (", default_batch_formula(topology), " = ",
                                                        global_batch(), " rows)"),
                               " exceeds the ", examples, " training examples of the lm workload: give --batch N with ",
                               "N <= ", examples, " (ranks beyond N hold empty shards)"));
    }
  }
  if (w == "lm") {
    require_micro_batches_fit(topology, global_batch(),
                              run_config       ? "the config's training.batch_size"
                              : batch_size > 0 ? "--batch"
                                               : str_cat("the default batch (", default_batch_formula(topology), ")"));
  }
  if (!dist::backend_available(backend)) {
    throw InputError("--backend nccl: this build has no NCCL (configure against a CUDA LibTorch)");
  }
  if (backend == dist::BackendKind::kNccl) {
    throw InputError(
        "--backend nccl: the check workloads keep their tensors on the CPU and NCCL needs CUDA tensors; "
        "placing the workloads on the GPU is not implemented yet (use --backend gloo)");
  }
}

void apply_run_config(CheckSettings& s, std::shared_ptr<const RunConfig> config) {
  s.precision = config->precision;
  s.batch_size = config->batch_size;
  s.max_len = config->model.max_len;
  s.optimizer = config->optimizer.name;
  // A budget changes what REPLAY recomputes, not a value it computes (the same steps from the same
  // states: BinomialCheckpointing.ReplayUnderABudgetRecomputesThePlansCountWithinIt); its few
  // checked steps run with sqrt's.
  s.checkpoints =
      config->checkpoints == CheckpointSchedule::kBudget ? "sqrt" : checkpoint_schedule_name(config->checkpoints);
  s.seed = config->seed;
  s.label_smoothing = config->label_smoothing;
  s.steps = std::min(s.steps, config->steps);
  s.run_config = std::move(config);
}

}  // namespace magic::checks
