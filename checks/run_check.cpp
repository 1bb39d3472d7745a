#include "checks/run_check.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>

#include "checks/first_divergence.h"
#include "checks/lm_pipelines.h"
#include "checks/mutations.h"
#include "checks/spd_pipelines.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/live/tracer_sink.h"

namespace magic::checks {
namespace {

// `whole_records`: rank 0's records of a workload that holds them whole (three-pool).
PipelineOutputs run_distributed(const CheckSettings& s, const dist::Runtime& runtime, const std::string& mutation,
                                const ReferenceRun& reference, const std::string& trace_folder,
                                std::vector<DumpSink::Entry>& whole_records, TracerSink* tracer) {
  if (tracer != nullptr) tracer->begin_run(traced_run_name(mutation));
  if (s.resolved_workload() == "lm") return run_distributed_lm(s, runtime, mutation, reference, trace_folder, tracer);
  return run_distributed_spd(s, runtime, mutation, reference.states, reference.trace.empty() ? nullptr : &whole_records,
                             tracer);
}

// Where run `index` of this check writes its trace records ("" when none are kept).
std::string run_trace_folder(const CheckRequest& request, const ReferenceRun& reference, size_t index) {
  if (request.trace_folder.empty() || reference.trace.empty()) return "";
  return (std::filesystem::path(request.trace_folder) / str_cat("run", index)).string();
}

// The first divergence of run `index`, or why there is none to name.
std::string divergence_of(const CheckRequest& request, const ReferenceRun& reference, size_t index,
                          const CheckSettings& s, const std::vector<DumpSink::Entry>& whole_records) {
  if (std::string why = first_divergence_unavailable(s); !why.empty())
    return "first divergence: not traced (" + why + ")";
  if (s.resolved_workload() != "lm") return first_divergence(whole_records, reference.trace, s);
  const std::string folder = run_trace_folder(request, reference, index);
  if (folder.empty()) return "first divergence: not traced (the ranks run as threads, or under another launcher)";
  return first_divergence(folder, reference.trace, s);
}

// Why the AVG convention failed, with the shard label counts of each step at which they differ
// ("" if every step's shards are equal): each step's gradient is exact only if its own are.
std::string avg_convention_note(const CheckSettings& s) {
  constexpr size_t kShownSteps = 4;  // a long run lists its first few uneven steps and counts the rest
  std::vector<std::string> uneven;
  size_t shards = 0;
  for (int64_t step = 0; step < s.steps; ++step) {
    const auto counts = shard_label_counts(s, step);
    if (std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end()) continue;
    shards = counts.size();
    std::vector<std::string> shown;
    for (int64_t c : counts) shown.push_back(std::to_string(c));
    uneven.push_back(str_cat("step ", step, ": ", join(shown, ", ")));
  }
  if (uneven.empty()) return "";
  std::string listed =
      join(std::vector<std::string>(uneven.begin(), uneven.begin() + std::min(uneven.size(), kShownSteps)), "; ");
  if (uneven.size() > kShownSteps) listed += str_cat("; ", uneven.size() - kShownSteps, " more steps");
  return str_cat("--convention avg (local mean, AVG reduction) is exact only when every shard holds the same number ",
                 "of valid labels; the ", shards, " shards' counts differ at ", uneven.size(), " of ", s.steps,
                 " steps (", listed,
                 "; a shard is a rank's rows and, with cp, its chunk pair). Each shard's mean gets weight 1/(dp*cp) ",
                 "instead of its share of the global count. ", "Use --convention sum.");
}

}  // namespace

std::string unjudged_level(const std::vector<CheckRow>& clean, const std::string& level) {
  const CheckRow* example = nullptr;
  for (const auto& row : clean) {
    if (row.level != level) continue;
    if (row_judged(row)) return "";
    example = &row;
  }
  if (example == nullptr) return "";
  return str_cat("its level (", level, ") carries no signal on this run (", example->diagnosis.text, ")");
}

// Under a low-precision policy the reference runs twice: with the policy (the candidate's teacher
// and partner) and in fp64 (the golden run both are measured against).
ReferenceRuns run_references(const CheckSettings& s) {
  const auto run = [](const CheckSettings& settings) {
    return settings.resolved_workload() == "lm" ? run_reference_lm(settings) : run_reference_spd(settings);
  };
  dist::set_phase("reference");
  ReferenceRuns runs{run(s), std::nullopt};
  if (s.precision.low_precision()) {
    CheckSettings fp64 = s;
    fp64.precision = PrecisionPolicy{};
    dist::set_phase("golden reference (fp64)");
    runs.golden = run(fp64);
  }
  return runs;
}

std::shared_ptr<const ReferenceRuns> references_for_ranks(const CheckSettings& settings) {
  at::set_num_threads(1);
  return std::make_shared<const ReferenceRuns>(run_references(settings));
}

CheckReport report_header(const CheckRequest& request) {
  const CheckSettings& s = request.settings;
  CheckReport report;
  report.topology = s.topology.str();
  report.world_size = s.topology.world_size();
  report.workload = s.resolved_workload();
  if (s.run_config) report.config = s.run_config->source;
  report.model = s.model_folder;
  report.dtype = s.precision.str();
  report.convention = dist::convention_name(s.convention);
  report.backend = dist::backend_name(s.backend);
  report.steps = s.steps;
  report.seed = s.seed;
  if (request.mode == CheckMode::kMutate) report.mutation = request.mutation;
  report.bite_mode = request.mode == CheckMode::kBite;
  return report;
}

std::string traced_run_name(const std::string& mutation) {
  return mutation.empty() ? "clean" : "mutation " + mutation;
}

CheckReport run_check(const CheckRequest& request, const dist::Runtime& runtime, TracerSink* tracer) {
  const auto start = std::chrono::steady_clock::now();
  const CheckSettings& s = request.settings;
  std::vector<Mutation> mutations;
  BitePlan plan;
  if (request.mode == CheckMode::kMutate)
    mutations.push_back(find_mutation(request.mutation, s.topology, s.levels, s.precision, run_traits(s)));
  if (request.mode == CheckMode::kBite) {
    plan = plan_bite(s.topology, s.levels, s.precision, run_traits(s));
    mutations = plan.run;
  }

  // The reference on every rank unless the launcher computed it for all (it needs no
  // communication: every rank gets the states the grad level is evaluated at); then the
  // distributed runs, clean first (unless --mutate), then each mutation.
  const std::shared_ptr<const ReferenceRuns> references =
      request.references ? request.references : std::make_shared<const ReferenceRuns>(run_references(s));
  const ReferenceRun& reference = references->reference;
  const PipelineOutputs* golden_outputs = references->golden ? &references->golden->outputs : nullptr;
  dist::set_phase("distributed pipeline");
  std::vector<PipelineOutputs> runs;
  std::vector<std::vector<DumpSink::Entry>> whole_records;  // by run, three-pool only
  const auto run = [&](const CheckSettings& settings, const std::string& mutation) {
    whole_records.emplace_back();
    runs.push_back(run_distributed(settings, runtime, mutation, reference,
                                   run_trace_folder(request, reference, runs.size()), whole_records.back(), tracer));
  };
  if (request.mode != CheckMode::kMutate) run(s, "");
  // A --bite mutation is judged by its first failing level: its run computes the levels up to
  // its expected one only (a grad-level bug needs no training run and no REPLAY).
  const auto mutation_settings = [&](const Mutation& m) {
    CheckSettings gated = s;
    if (request.mode == CheckMode::kBite) gated.levels = s.levels_through(m.expected_level);
    return gated;
  };
  for (const auto& m : mutations) run(mutation_settings(m), m.name);

  CheckReport report = report_header(request);
  if (runtime.rank() != 0) return report;

  dist::set_phase("comparison");
  report.rows = compare_outputs(runs.front(), reference.outputs, s, golden_outputs);
  if (s.resolved_workload() == "lm" && s.convention == dist::Convention::kAvg && !report.rows_pass()) {
    if (std::string note = avg_convention_note(s); !note.empty()) report.notes.push_back(note);
  }
  if (!report.rows_pass()) report.first_divergence = divergence_of(request, reference, 0, s, whole_records.front());
  if (request.mode == CheckMode::kMutate) {
    report.bite.push_back(judge_mutation(mutations.front(), s.topology, report.rows, s.precision));
  }
  report.bite_skipped = plan.skipped;
  for (size_t i = 0; request.mode == CheckMode::kBite && i < mutations.size(); ++i) {
    // Under low precision a level may carry no signal on this run (its rows not judged by value):
    // a bug there cannot be told from rounding, so the mutation is skipped, saying why.
    if (std::string why = unjudged_level(report.rows, mutations[i].expected_level); !why.empty()) {
      report.bite_skipped.push_back({mutations[i].name, why});
      continue;
    }
    const CheckSettings gated = mutation_settings(mutations[i]);
    BiteOutcome outcome = judge_mutation(
        mutations[i], s.topology, compare_outputs(runs[i + 1], reference.outputs, gated, golden_outputs), s.precision);
    if (outcome.observed_level.empty()) outcome.observed_diagnosis = "through " + mutations[i].expected_level;
    if (!outcome.observed_level.empty() && first_divergence_unavailable(s).empty()) {
      outcome.first_divergence = divergence_of(request, reference, i + 1, gated, whole_records[i + 1]);
    }
    report.bite.push_back(std::move(outcome));
  }
  // Said once for the whole --bite run rather than under every mutation.
  if (request.mode == CheckMode::kBite) {
    if (std::string why = first_divergence_unavailable(s); !why.empty()) {
      report.notes.push_back("first divergence: not traced (" + why + ")");
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace magic::checks
