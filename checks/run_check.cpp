#include "checks/run_check.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "checks/first_divergence.h"
#include "checks/lm_pipelines.h"
#include "checks/mutations.h"
#include "checks/spd_pipelines.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/live/tracer_sink.h"

namespace magic::checks {
namespace {

// The outputs on the host, beside the reference's: a run on a GPU computed them there (run_device.h).
PipelineOutputs on_host(PipelineOutputs outputs) {
  const auto host = [](const at::Tensor& t) { return t.defined() ? t.to(at::kCPU) : t; };
  for (NamedTensor& o : outputs) {
    o.value = host(o.value);
    if (o.reduction) {
      o.reduction->exact = host(o.reduction->exact);
      o.reduction->magnitude = host(o.reduction->magnitude);
    }
  }
  return outputs;
}

// `whole_records`: rank 0's records of a workload that holds them whole (three-pool).
PipelineOutputs run_distributed(const CheckSettings& s, const dist::Runtime& runtime, const std::string& mutation,
                                const ReferenceRun& reference, const std::string& trace_folder,
                                std::vector<DumpSink::Entry>& whole_records, TracerSink* tracer,
                                const std::string& pass) {
  if (tracer != nullptr) tracer->begin_run(traced_run_name(mutation) + pass);
  if (s.resolved_workload() == "lm") {
    return on_host(run_distributed_lm(s, runtime, mutation, reference, trace_folder, tracer));
  }
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

// Why the AVG convention is wrong on this run, with the shard label counts of each step at which
// they differ ("" if every step's shards are equal): each step's gradient is exact only if its own
// are. Said in every dtype (the shard_weights row fails in every dtype too), whatever the other rows
// show: bf16's noise in the gradient rows can hide the error the counts make certain.
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
  return str_cat(
      "AVG meets unequal shards: --convention avg (local mean, AVG reduction) is exact only when every "
      "shard holds the same number ",
      "of valid labels; the ", shards, " shards' counts differ at ", uneven.size(), " of ", s.steps, " steps (", listed,
      "; a shard is a rank's rows and, with cp, its chunk pair). Each shard's mean gets weight 1/(dp*cp) ",
      "instead of its share of the global count. ", "Use --convention sum.");
}

// Whether the fp32 pass judges `row` again: a row weakly judged in its own dtype, and a row whose
// criterion asks for it (a summary such as the clip coefficient, wherever a run below fp32 clips:
// bf16 resolves a gradient norm only to its floor u·√n, so a coefficient a few per cent off is
// within the row's allowance; docs/magic-check.md, "Mixed precision").
bool judged_again_at_fp32(const CheckRow& row) {
  return row_weakly_judged(row) || (row.precision && row.precision->judged_again_at_fp32);
}

// The levels (all_levels() order) of the rows the fp32 pass would judge again.
std::vector<Level> weak_levels(const std::vector<CheckRow>& rows) {
  std::vector<Level> out;
  for (Level l : all_levels()) {
    const bool weak = std::any_of(rows.begin(), rows.end(), [&](const CheckRow& row) {
      return row.level == level_name(l) && row.pass.empty() && judged_again_at_fp32(row);
    });
    if (weak) out.push_back(l);
  }
  return out;
}

// Rank 0's choice, made the same on every rank (one broadcast over the world group).
std::vector<Level> agree_on_levels(const dist::Runtime& runtime, const std::vector<Level>& chosen) {
  const auto& levels = all_levels();
  at::Tensor mask = at::zeros({static_cast<int64_t>(levels.size())}, at::kDouble);
  for (Level l : chosen) mask[level_rank(level_name(l))] = 1.0;
  if (runtime.world_size() > 1) runtime.world()->broadcast_(mask, 0);
  std::vector<Level> out;
  for (size_t i = 0; i < levels.size(); ++i) {
    if (mask[static_cast<int64_t>(i)].item<double>() > 0.5) out.push_back(levels[i]);
  }
  return out;
}
bool agree(const dist::Runtime& runtime, bool chosen) {
  return !agree_on_levels(runtime, chosen ? std::vector<Level>{Level::kGrad} : std::vector<Level>{}).empty();
}

// `rows` with each row judged again followed by its partner from the fp32 pass, where that
// partner is judged there by value or by the factor rule (under Adam the rows at θ_N: the query
// gradient, whose factor bf16's noise blurs); not where neither is.
std::vector<CheckRow> merge_fp32_rows(const std::vector<CheckRow>& rows, const std::vector<CheckRow>& fp32_rows) {
  std::vector<CheckRow> out;
  for (const auto& row : rows) {
    out.push_back(row);
    if (!row.pass.empty() || !judged_again_at_fp32(row)) continue;
    for (const auto& partner : fp32_rows) {
      if (partner.level != row.level || partner.tensor != row.tensor) continue;
      if (partner.precision && !partner.precision->values_judged && !partner.precision->factors_judged) break;
      out.push_back(partner);
      out.back().pass = "fp32";
      break;
    }
  }
  return out;
}

}  // namespace

std::string unjudged_level(const std::vector<CheckRow>& clean, const std::string& level, bool factor_expected) {
  const CheckRow* example = nullptr;
  for (const auto& row : clean) {
    if (row.level != level || !row.pass.empty()) continue;  // the check's own dtype only
    if (row_judged(row) || (factor_expected && row.precision && row.precision->factors_judged)) return "";
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
  ReferenceRuns runs{run(s), std::nullopt, std::nullopt};
  if (s.precision.low_precision()) {
    CheckSettings fp64 = s;
    fp64.precision = PrecisionPolicy{};
    dist::set_phase("golden reference (fp64)");
    runs.golden = run(fp64);
  }
  if (const auto fp32 = fp32_pass_settings(s)) {
    dist::set_phase("reference of the fp32 pass");
    runs.fp32 = run(*fp32);
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
  report.label_smoothing = s.label_smoothing;
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
  const std::optional<CheckSettings> fp32 = fp32_pass_settings(s);
  const bool speaks = runtime.rank() == 0;
  dist::set_phase("distributed pipeline");
  size_t runs = 0;                                          // distributed runs so far (trace folders)
  std::vector<std::vector<DumpSink::Entry>> whole_records;  // by run, three-pool only
  // One distributed run: rank 0 gets its rows, the others none.
  const auto run = [&](const CheckSettings& settings, const std::string& mutation) {
    whole_records.emplace_back();
    const PipelineOutputs outputs =
        run_distributed(settings, runtime, mutation, reference, run_trace_folder(request, reference, runs++),
                        whole_records.back(), tracer, "");
    return speaks ? compare_outputs(outputs, reference.outputs, settings, golden_outputs) : std::vector<CheckRow>{};
  };
  // The fp32 pass of a run whose rows (rank 0's) leave some row weakly judged: the same run at fp32
  // compute, through the levels of those rows, which it judges again beside them.
  const auto with_fp32_pass = [&](const std::vector<CheckRow>& rows, const CheckSettings& settings,
                                  const std::string& mutation) {
    CheckSettings again = *fp32;
    again.levels = agree_on_levels(runtime, speaks ? weak_levels(rows) : std::vector<Level>{});
    if (again.levels.empty()) return rows;
    again.levels = settings.levels_through(level_name(again.levels.back()));
    dist::set_phase("distributed pipeline (fp32 pass)");
    std::vector<DumpSink::Entry> unused;
    const PipelineOutputs outputs =
        run_distributed(again, runtime, mutation, *references->fp32, "", unused, tracer, " (fp32 pass)");
    dist::set_phase("distributed pipeline");
    if (!speaks) return rows;
    return merge_fp32_rows(rows, compare_outputs(outputs, references->fp32->outputs, again, golden_outputs));
  };
  // A --bite mutation is judged by its first failing level: its run computes the levels up to
  // its expected one only (a grad-level bug needs no training run and no REPLAY).
  const auto mutation_settings = [&](const Mutation& m) {
    CheckSettings gated = s;
    if (request.mode == CheckMode::kBite) gated.levels = s.levels_through(m.expected_level);
    return gated;
  };
  // A mutation of the precision policy itself (loss scaling, reduction dtype, master weights)
  // stays judged in its own dtype only.
  const auto fp32_judges = [&](const Mutation& m) { return fp32 && m.precision_need == PrecisionNeed::kNone; };
  CheckReport report = report_header(request);
  if (request.mode == CheckMode::kPlain) {
    report.rows = run(s, "");
    if (fp32) report.rows = with_fp32_pass(report.rows, s, "");
  } else {
    // --bite's clean run, or --mutate's one mutation.
    const Mutation* m = request.mode == CheckMode::kMutate ? &mutations.front() : nullptr;
    report.rows = run(s, m ? m->name : "");
    if (fp32 && (m == nullptr || fp32_judges(*m))) report.rows = with_fp32_pass(report.rows, s, m ? m->name : "");
  }
  if (speaks) {
    dist::set_phase("comparison");
    if (s.resolved_workload() == "lm" && s.convention == dist::Convention::kAvg) {
      if (std::string note = avg_convention_note(s); !note.empty()) report.notes.push_back(note);
    }
    if (!report.rows_pass()) report.first_divergence = divergence_of(request, reference, 0, s, whole_records.front());
    if (request.mode == CheckMode::kMutate) {
      report.bite.push_back(judge_mutation(mutations.front(), s.topology, report.rows, s.precision));
    }
    report.bite_skipped = plan.skipped;
    dist::set_phase("distributed pipeline");
  }
  for (size_t i = 0; request.mode == CheckMode::kBite && i < mutations.size(); ++i) {
    const Mutation& m = mutations[i];
    // Under low precision a level may carry no signal on this run (its rows not judged by value):
    // without an fp32 pass to judge it (a mutation of the precision policy) a bug there cannot be
    // told from rounding, so the mutation is skipped, saying why.
    const std::string why =
        speaks && !fp32_judges(m) ? unjudged_level(report.rows, m.expected_level, !m.expected_factor.empty()) : "";
    if (agree(runtime, !why.empty())) {
      if (speaks) report.bite_skipped.push_back({m.name, why});
      continue;
    }
    const CheckSettings gated = mutation_settings(m);
    // Judged in its own dtype first; the fp32 pass only where that does not catch it.
    std::vector<CheckRow> rows = run(gated, m.name);
    const size_t index = runs - 1;
    BiteOutcome outcome;
    if (speaks) outcome = judge_mutation(m, s.topology, rows, s.precision);
    if (fp32_judges(m) && agree(runtime, speaks && !outcome.caught)) {
      rows = with_fp32_pass(rows, gated, m.name);
      if (speaks) outcome = judge_mutation(m, s.topology, rows, s.precision);
    }
    if (!speaks) continue;
    dist::set_phase("comparison");
    if (outcome.observed_level.empty()) outcome.observed_diagnosis = "through " + m.expected_level;
    if (!outcome.observed_level.empty() && first_divergence_unavailable(s).empty()) {
      outcome.first_divergence = divergence_of(request, reference, index, gated, whole_records[index]);
    }
    report.bite.push_back(std::move(outcome));
    dist::set_phase("distributed pipeline");
  }
  if (!speaks) return report;
  // Said once for the whole --bite run rather than under every mutation.
  if (request.mode == CheckMode::kBite) {
    if (std::string why = first_divergence_unavailable(s); !why.empty()) {
      report.notes.push_back("first divergence: not traced (" + why + ")");
    }
  }
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - request.started.value_or(start)).count();
  return report;
}

}  // namespace magic::checks
