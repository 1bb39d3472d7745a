#include "checks/check_memory.h"

#include <algorithm>
#include <cmath>

#include "checks/lm_pipelines.h"
#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/model/gpt.h"
#include "lib/model/spd.h"
#include "lib/train/memory_estimate.h"

namespace magic::checks {

namespace {

// Per step, bytes ≈ (kPerParameter·P + kPerStateEntry·S)·element, with P the parameters and S the
// entries of a training state (parameters and optimizer state). Fitted to peak memory measured at
// 8 and 40 steps (docs/benchmarks.md): at dp=2 and dp=2,cp=2 about 23.5·P per reference step
// and per rank under adamw (S = 3·P), 17.4·P under sgd (S = P); these give 26.5·P and 19.5·P.
constexpr double kPerParameter = 16.0;
constexpr double kPerStateEntry = 3.5;
// A --bite mutation's run keeps the rows of its levels only: measured 0.19 of a clean run's.
constexpr double kMutationShare = 0.25;

struct WorkloadSize {
  double parameters = 0, state_entries = 0;
  double activations = 0;                        // one step's graph in the policy's compute dtype (bytes)
  double reference_copies = 1, rank_copies = 1;  // of what the constants above give
};

WorkloadSize lm_size(const CheckSettings& s) {
  CheckSettings one_step = s;
  one_step.steps = 1;  // the per-step figures do not depend on the length of the run
  const RunConfig config = lm_unclipped_config(one_step);
  const MemoryEstimate run = estimate_run_memory(config);
  WorkloadSize w;
  w.parameters = gpt_parameter_count(config.model);
  w.state_entries =
      static_cast<double>(run.state_bytes) / static_cast<double>(c10::elementSize(config.precision.master));
  // memory_estimate.h counts 3 graphs' worth for a REPLAY step; the reference keeps 2 per step
  // (the forward and the backward kept for differentiation), measured 0.27 MiB a row at dp=2.
  w.activations = static_cast<double>(run.activation_bytes) * 2.0 / 3.0;
  return w;
}

WorkloadSize spd_size(const CheckSettings& s) {
  SpdConfig config;
  config.n_sites = s.spd_sites();
  WorkloadSize w;
  w.parameters = static_cast<double>(spd_init_params(config, at::kFloat, 0).numel());
  const double sources = static_cast<double>(spd_init_all_sources(config, at::kFloat).numel());
  w.state_entries = 3 * w.parameters + sources;  // Adam's two moments; the PPGD sources
  // Each step keeps a gradient per loss term (four, and their total) where the lm keeps one, and
  // the reference its sources: measured 0.53 MiB per reference step and 0.15 MiB per rank at
  // n_ci=2,4,6 (5.5x and 2.2x what the lm's constants give). The first divergence's whole records
  // (first_divergence.h: ~7 parameter-sized trees a step, in the reference and on rank 0) added
  // 7% at n_ci=2,n_per_block=1 (1.52 -> 1.64 MB a step measured).
  w.reference_copies = 7.5;
  w.rank_copies = 3.0;
  // Each example's forward through every site's components, its masks and the four terms.
  w.activations = static_cast<double>(s.global_batch()) * static_cast<double>(config.n_sites) *
                  static_cast<double>(config.components * (config.ci_hidden + config.width) * 8) *
                  static_cast<double>(c10::elementSize(s.precision.compute));
  return w;
}

double step_bytes(const WorkloadSize& w, size_t element, double copies) {
  return copies * (kPerParameter * w.parameters + kPerStateEntry * w.state_entries) * static_cast<double>(element);
}

}  // namespace

std::string CheckMemoryEstimate::str() const {
  return str_cat(format_bytes(total()), " (", steps, " steps of ", format_bytes(per_step()), ": the reference",
                 references > 1 ? " runs " : " ", format_bytes(reference_step), ", ", ranks,
                 ranks > 1 ? " ranks " : " rank ", format_bytes(rank_step), ranks > 1 ? " each" : "", ")");
}

CheckMemoryEstimate estimate_check_memory(const CheckSettings& s, int64_t mutation_runs) {
  const auto size_at = [&](const PrecisionPolicy& precision) {
    CheckSettings at = s;
    at.precision = precision;
    return s.resolved_workload() == "lm" ? lm_size(at) : spd_size(at);
  };
  CheckMemoryEstimate e;
  e.steps = s.steps;
  e.ranks = s.topology.world_size();
  const WorkloadSize policy = size_at(s.precision);
  e.reference_step =
      policy.activations + step_bytes(policy, c10::elementSize(s.precision.master), policy.reference_copies);
  if (s.precision.low_precision()) {
    e.references = 2;
    const WorkloadSize golden = size_at(PrecisionPolicy{});
    e.reference_step += golden.activations + step_bytes(golden, sizeof(double), golden.reference_copies);
  }
  // Below fp32 the fp32 pass: its reference, and one more run's rows on each rank.
  const std::optional<CheckSettings> fp32 = fp32_pass_settings(s);
  if (fp32) {
    e.references = 3;
    const WorkloadSize at_fp32 = size_at(fp32->precision);
    e.reference_step += at_fp32.activations + step_bytes(at_fp32, sizeof(float), at_fp32.reference_copies);
  }
  // Rows counted as fp64 (they are kept in the master dtype: a bound); the fp32 pass's in fp32.
  const double runs = 1.0 + (fp32 ? 0.5 : 0.0) + kMutationShare * static_cast<double>(mutation_runs);
  e.rank_step = step_bytes(policy, sizeof(double), policy.rank_copies) * runs;
  return e;
}

void require_check_memory(const CheckSettings& s, const CheckMemoryEstimate& e, int64_t available) {
  if (available <= 0 || e.total() <= static_cast<double>(available)) return;
  const auto fit = static_cast<int64_t>(std::floor(static_cast<double>(available) / e.per_step()));
  throw InputError(str_cat("--steps ", s.steps, ": this check needs about ", e.str(), ", above the ",
                           format_bytes(static_cast<double>(available)), " available; ",
                           fit >= 1 ? str_cat("about ", fit, " steps fit") : "not even one step fits",
                           " (a check needs few steps: a bug shows from the first)"));
}

}  // namespace magic::checks
