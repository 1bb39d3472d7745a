// magic-check: runs the MAGIC pipeline distributed on a given layout and as a single-process
// reference, compares gradients, Hessian-vector products, final parameters and scores, and says
// which tensor is off and by which factor. --bite plants known bugs and proves each is caught.
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checks/check_memory.h"
#include "checks/mutations.h"
#include "checks/run_check.h"
#include "lib/core/allocator.h"
#include "lib/core/dtype.h"
#include "lib/core/error.h"
#include "lib/core/process_exit.h"
#include "lib/core/scratch_folder.h"
#include "lib/core/stop_signal.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/parallel/mesh_explain.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/distributed/runtime/rank_program.h"
#include "lib/io/output_path.h"
#include "lib/io/report.h"
#include "lib/live/live_tracer.h"
#include "lib/live/trace_server.h"
#include "lib/train/distributed_lm.h"
#include "lib/train/memory_estimate.h"
#include "tools/check_command.h"
#include "tools/trace_flags.h"
#include "tools/viewer_assets.h"

namespace {

using namespace magic;

// Who the tracer's records come from: the check, this rank and, on a mesh, its coordinates. Each
// distributed run then names itself (checks::traced_run_name).
TraceOrigin check_trace_origin(const checks::CheckSettings& s, const dist::Runtime& runtime) {
  TraceOrigin o;
  o.run = str_cat("magic-check ", s.topology.str());
  o.rank = runtime.rank();
  o.ranks = runtime.world_size();
  if (s.resolved_workload() == "lm") {
    const TraceLayout layout = dist::trace_mesh(dist::MeshLayout(s.topology), runtime.rank());
    o.mesh = layout.mesh;
    o.coords = layout.coords;
  }
  return o;
}

int run_rank(const CheckCommand& c, const dist::Runtime& runtime) {
  const bool speaks = runtime.rank() == 0;
  std::optional<LiveTracer> tracer;
  if (c.trace) {
    tracer.emplace(*c.trace, check_trace_origin(c.request.settings, runtime), viewer_assets(), trace_relay(&runtime),
                   speaks ? &std::cout : nullptr);
    tracer->wait_for_client(speaks ? &std::cout : nullptr);
  }
  const CheckReport report = checks::run_check(c.request, runtime, tracer ? tracer->sink() : nullptr);
  // The check ran to its report, whatever the verdict: the stream's end says "finished".
  if (tracer) tracer->finish("finished");
  if (!speaks) return kExitOk;
  dist::set_phase("writing the report");
  print_report(report, std::cout);
  if (!c.json_path.empty()) write_json_report(c.json_path, report);
  if (!c.junit_path.empty()) write_junit_report(c.junit_path, report);
  return report.exit_code();
}

// Whether this process writes the run's reports when the run fails: the launcher (or the process
// of --launch threads), and rank 0 under torchrun or srun, where no launcher of ours watches.
bool writes_failure_reports() {
  if (!dist::running_as_rank()) return true;
  return std::string(std::getenv("RANK")) == "0" && std::getenv("MAGIC_RANK_LOG") == nullptr;
}

// The reports of a run that ended before rank 0 could make them (a rank failed): CI reads a
// failing case with the reason, and the rank to blame where one is named, rather than finding
// no results.
void write_failure_reports(const CheckCommand& c, const std::string& why, const dist::RankFailure* blamed = nullptr) {
  if ((c.json_path.empty() && c.junit_path.empty()) || !writes_failure_reports()) return;
  CheckReport r = checks::report_header(c.request);
  r.failure = why.empty() ? "the run failed before rank 0 wrote its report" : why;
  if (blamed != nullptr && blamed->rank >= 0) {
    r.failed_rank =
        FailedRank{blamed->rank, blamed->kind, blamed->phase, blamed->message, dist::fails_the_check(*blamed)};
  }
  try {
    if (!c.json_path.empty()) write_json_report(c.json_path, r);
    if (!c.junit_path.empty()) write_junit_report(c.junit_path, r);
  } catch (const std::exception& e) {
    std::cerr << "magic-check: could not write the failure's report: " << dist::one_line_error(e) << std::endl;
  }
}

// The launcher's lines about a failed run, without blank lines, as one message.
std::string failure_text(const std::string& launcher_messages) {
  std::vector<std::string> lines;
  for (const auto& line : split(launcher_messages, '\n')) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  }
  return join(lines, "\n");
}

// When the command started, the same on every rank: the launcher's reading of steady_clock (one
// clock for every process of a machine), handed to its ranks in the environment. A rank of a
// launcher not ours (torchrun, srun) counts from its own start.
std::chrono::steady_clock::time_point command_started() {
  constexpr const char* kVariable = "MAGIC_CHECK_STARTED_NS";
  static const std::chrono::steady_clock::time_point started = [] {
    const char* inherited = std::getenv(kVariable);
    if (dist::running_as_rank() && inherited != nullptr) {
      char* end = nullptr;
      const long long ns = std::strtoll(inherited, &end, 10);
      if (end != inherited && *end == '\0') return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
    }
    const auto now = std::chrono::steady_clock::now();
    if (!dist::running_as_rank()) {
      setenv(kVariable, std::to_string(std::chrono::nanoseconds(now.time_since_epoch()).count()).c_str(), 1);
    }
    return now;
  }();
  return started;
}

// main(); also entered by each spawned rank forked from the launcher (RankProgram::entry), with
// the references the launcher computed before forking and its trace folder.
int check_main(int argc, char** argv, std::shared_ptr<const checks::ReferenceRuns> inherited_references,
               const std::string& inherited_trace_folder) {
  const std::string who = dist::running_as_rank() ? str_cat("magic-check: rank ", std::getenv("RANK")) : "magic-check";
  std::unique_ptr<CheckCommand> parsed;  // set once the flags are known good: from then on every exit writes reports
  // One line for the user (the launcher relays a rank's last such line); a backtrace goes to the
  // rank's log only.
  const auto fail = [&](const char* kind, const std::exception& e) {
    const std::string line = dist::one_line_error(e);
    if (line != e.what()) dist::note_in_rank_log(e.what());
    std::cerr << who << ": " << kind << ": " << line << std::endl;
    if (parsed) write_failure_reports(*parsed, str_cat(kind, ": ", line));
    return static_cast<int>(kExitBadInput);
  };
  try {
    int early_exit = -1;
    parsed = std::make_unique<CheckCommand>(parse_check_command(argc, argv, early_exit));
    if (early_exit >= 0) return early_exit;
    CheckCommand& command = *parsed;
    command.request.started = command_started();
    // On the machine that starts the ranks, before anything grows (a failure here is reported
    // like any other: the flags are known good). Under torchrun the ranks may be on several machines.
    if (!dist::running_as_rank()) {
      const checks::CheckSettings& s = command.request.settings;
      const checks::CheckMemoryEstimate memory = checks::estimate_check_memory(s, command.mutation_runs);
      const int64_t available = available_memory_bytes();
      checks::require_check_memory(s, memory, available);
      // Said before anything grows, as magic-run does: a model folder's check can need gigabytes.
      std::cerr << "magic-check: estimated peak memory " << memory.str()
                << (available > 0 ? str_cat(", of ", format_bytes(static_cast<double>(available)), " available") : "")
                << std::endl;
    }
    // A forked rank enters here while this frame, in its copy of the launcher's memory, is live.
    command.program.entry = [&command](int rank_argc, char** rank_argv) {
      return check_main(rank_argc, rank_argv, command.request.references, command.request.trace_folder);
    };
    std::string launcher_messages;
    command.program.launcher_messages = &launcher_messages;
    dist::RankFailure blamed;  // the rank a failed run is blamed on, when one is named
    command.program.failure = &blamed;
    command.request.references = std::move(inherited_references);
    // Once here instead of on every rank, when the ranks inherit it.
    if (!command.request.references && dist::ranks_share_memory(command.program)) {
      const StopSignalScope stop_on_signal;  // minutes on a long check: SIGINT/SIGTERM end it with exit 2
      command.request.references = checks::references_for_ranks(command.request.settings);
    }
    // Forked ranks share this folder by inheritance; threads and other launchers name no first divergence.
    // None made (no room in TMPDIR): no first divergence, and the report says it was not traced.
    std::optional<ScratchFolder> trace_folder;
    command.request.trace_folder = inherited_trace_folder;
    if (!dist::running_as_rank() && command.program.launch == "spawn" && command.request.references) {
      command.request.trace_folder = trace_folder.emplace("magic-check-trace").path();
    }
    const int code = dist::run_rank_program(command.program, argc, argv,
                                            [&](const dist::Runtime& runtime) { return run_rank(command, runtime); });
    if (code == kExitBadInput && !dist::running_as_rank()) {
      write_failure_reports(command, failure_text(launcher_messages), &blamed);
      // A rank that failed on the code under test (its own error, or a crash) is a failed check,
      // not a failed run: exit 1 (docs/magic-check.md, "Launching ranks and when a rank fails").
      if (dist::fails_the_check(blamed)) return kExitCheckFailed;
    }
    return code;
  } catch (const InputError& e) {
    return fail("error", e);
  } catch (const StopRequested& e) {
    return fail("interrupted", e);
  } catch (const DistributedError& e) {
    return fail("distributed failure", e);
  } catch (const std::exception& e) {
    return fail("failed", e);
  }
}

}  // namespace

int main(int argc, char** argv) {
  command_started();                                                            // the report's wall time
  magic::keep_freed_memory_in_process();                                        // lib/core/allocator.h
  magic::exit_without_static_destructors(check_main(argc, argv, nullptr, ""));  // lib/core/process_exit.h
}
