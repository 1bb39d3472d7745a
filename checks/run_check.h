// One magic-check run on this rank: the single-process reference (unless given), the distributed
// pipeline for the clean run, the one planted mutation (--mutate) or every mutation that applies
// (--bite); then, on rank 0, the comparison rows and the bite verdicts.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "checks/check_settings.h"
#include "checks/pipeline_outputs.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/io/report.h"

namespace magic {
class TracerSink;  // lib/live/tracer_sink.h
}  // namespace magic

namespace magic::checks {

enum class CheckMode { kPlain, kMutate, kBite };

// The single-process runs a check is judged against: the reference and, under a low-precision
// policy, the fp64 golden run. A function of the settings alone, with no communication.
struct ReferenceRuns {
  ReferenceRun reference;
  std::optional<ReferenceRun> golden;
  // Below fp32: the reference of the fp32 pass (fp32_pass_settings), where rows that go unjudged
  // in the check's own dtype are judged again.
  std::optional<ReferenceRun> fp32;
};
ReferenceRuns run_references(const CheckSettings& settings);

// run_references as a launcher computes it for ranks that will share its memory: with one
// intra-op thread, as each rank runs (the same numbers), which also starts no thread in the
// launcher, so that its ranks can still be forked (launcher.h).
std::shared_ptr<const ReferenceRuns> references_for_ranks(const CheckSettings& settings);

struct CheckRequest {
  CheckSettings settings;
  CheckMode mode = CheckMode::kPlain;
  std::string mutation;  // kMutate only
  // run_references(settings), computed once by a launcher whose ranks share its memory (forked or
  // threads); null: each rank computes it.
  std::shared_ptr<const ReferenceRuns> references;
  // A folder every rank can write, for the first divergence of a failing run (first_divergence.h);
  // "": none is named.
  std::string trace_folder;
  // When the command started (the launcher's start, before its references and the ranks): the
  // report's seconds are the wall time since then. None: since run_check began.
  std::optional<std::chrono::steady_clock::time_point> started;
};

// Why the clean run's rows at `level` cannot judge a bug there in the check's own dtype ("" when
// they can): every row of the level passed without being judged by value (bf16 scores, whose
// policy is far from fp64). Rows of the fp32 pass are not the own dtype's.
// --bite skips a mutation expected at such a level, saying so, rather than call it caught or missed.
// A mutation that shows as a factor (`factor_expected`) is judged where the level's rows are judged
// by factor (the rows at θ_N under Adam: pipeline_outputs.cpp).
std::string unjudged_level(const std::vector<CheckRow>& clean, const std::string& level, bool factor_expected = false);

// The run's name in the live tracer's records (TraceOrigin::run): "clean", or "mutation NAME".
std::string traced_run_name(const std::string& mutation);

// The report's description of the run (layout, workload, dtype, ...) with no rows yet: what
// run_check fills in, and what a run that fails before rank 0 reports carries.
CheckReport report_header(const CheckRequest& request);

// Every rank calls it. Rank 0 gets the full report; other ranks an empty one (exit code 0).
// Below fp32 each run whose rows leave some row unjudged by value (or judged so loosely that a
// factor of 2 passes: row_weakly_judged) is run again at fp32 compute (the fp32 pass), and those
// rows judged there are added after their partners (CheckRow::pass "fp32"). Under --bite a mutation
// gets the fp32 pass only where its own dtype's rows do not catch it, and never a mutation of the
// precision policy itself (loss scaling, reduction dtype, master weights), which stays judged in
// its own dtype.
// `tracer`: the rank's live tracer (docs/tracer.md): each distributed run is begun on it by name
// ("clean", "mutation NAME") and streams its records; the reference is not traced.
CheckReport run_check(const CheckRequest& request, const dist::Runtime& runtime, TracerSink* tracer = nullptr);

}  // namespace magic::checks
