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
#include "tools/trace_flags.h"
#include "tools/viewer_assets.h"

namespace {

using namespace magic;

struct Command {
  checks::CheckRequest request;
  std::string json_path, junit_path;
  dist::RankProgram program;
  bool list_mutations = false;
  int64_t mutation_runs = 0;                 // --bite: the planted runs beside the clean one
  std::optional<CheckedTraceOptions> trace;  // --trace-port, --trace-file: the live tracer (docs/tracer.md)
};

void list_mutations(std::ostream& out) {
  out << "Mutations (--mutate NAME; --bite runs all that apply). Expected: first failing level, factor.\n";
  for (const auto& m : checks::mutation_catalog()) {
    std::vector<std::string> needs;
    for (const auto& [size, least] : m.at_least) needs.push_back(str_cat(size, " >= ", least));
    for (const auto& [size, most] : m.at_most) needs.push_back(str_cat(size, " <= ", most));
    if (m.precision_need != checks::PrecisionNeed::kNone)
      needs.push_back(checks::precision_need_text(m.precision_need));
    if (needs.empty()) needs.push_back("always");
    out << "  " << m.name << "\n      " << m.description << "\n      expected: " << m.expected_level
        << (m.expected_factor.empty() ? "" : ", " + m.expected_factor) << "; applies when " << join(needs, ", ")
        << "\n";
  }
}

// Parses and validates everything before any rank starts; throws InputError.
Command parse(int argc, char** argv, int& early_exit) {
  Command c;
  auto& s = c.request.settings;
  std::string topology, dtype = "fp64", convention = "sum", checks_list, mutate, backend = "gloo";
  double timeout_s = 60;
  int64_t seed = 0;
  bool bite = false;
  CLI::App app{
      "magic-check: check a distributed MAGIC pipeline against a single-process reference.\n"
      "Example: magic-check --topology dp=4 --bite --json report.json\n"
      "Mesh layouts check a small GPT on the KJV fixture; three-pool layouts a small decomposition."};
  app.add_option("--topology", topology,
                 "layout, key=value[,...]: mesh dp=D[,cp=C][,tp=T][,fsdp=F][,mb=M], or three pools "
                 "n_ci=A,n_per_block=B[,n_blocks=2][,n_ppgd=2]");
  std::string run_config;
  app.add_option("--config", run_config,
                 "check this magic-run config (model, data, optimizer, schedule, reduction, weights, clipping, "
                 "dtype) on the layout for its first --steps steps, instead of the built-in workload");
  std::string model;
  app.add_option("--model", model,
                 "a Hugging Face model folder (GPT-2 or GPT-NeoX: config.json, safetensors, tokenizer): the built-in "
                 "workload trains it, with its tokenizer, instead of its own small GPT");
  app.add_option("--steps", s.steps, "training steps (with --config: the run's first K steps)")->capture_default_str();
  app.add_option("--dtype", dtype,
                 "fp64 | fp32 | bf16 | fp16 (bf16/fp16: fp32 master weights and reduction, fp16 loss scale 1024; "
                 "low precision is judged against an fp64 golden run, see docs/magic-check.md)")
      ->capture_default_str();
  double loss_scale = 0;
  std::string reduce_dtype;
  app.add_option("--loss-scale", loss_scale, "static loss scale (a power of two; default 1024 for fp16, else 1)");
  app.add_option("--reduce-dtype", reduce_dtype,
                 "dtype of the gradient reduction: the master (default) or compute dtype");
  app.add_option("--convention", convention,
                 "sum: honest global count + SUM (exact always); avg: local mean + AVG (exact on equal shards)")
      ->capture_default_str();
  app.add_option("--checks", checks_list,
                 "levels to compare: grad,optimizer,query_grad,hvp,replay,final_params,scores (default all)");
  app.add_option("--mutate", mutate, "plant one named bug (see --list-mutations)");
  app.add_flag("--bite", bite, "plant every bug that applies and fail unless each is caught as expected");
  app.add_flag("--list-mutations", c.list_mutations, "list the mutations and their expected signatures");
  bool explain_layout = false;
  app.add_flag("--explain-layout", explain_layout,
               "print the mesh layout's rank order and every rank's coordinates and groups, then exit without "
               "running (the other flags are checked first)");
  app.add_option("--json", c.json_path, "write the report as JSON (schema in docs/magic-check.md)");
  app.add_option("--junit", c.junit_path, "write the report as JUnit XML");
  app.add_option("--seed", seed, "seed of every random choice (init, data order, HVP direction)")
      ->capture_default_str();
  app.add_option("--optimizer", s.optimizer, "sgd | adam | adamw")->capture_default_str();
  app.add_option("--label-smoothing", s.label_smoothing,
                 "label smoothing eps in [0, 1) of the training loss, over the real vocabulary (default 0)");
  app.add_option(
      "--batch", s.batch_size,
      "global batch rows (default: 3 x dp + 1, uneven shards; (mb + 2) x dp + 1 with mb; three-pool: 4 x lcm "
      "of the pool sizes)");
  c.program.threads_allowed = true;
  c.program.progress_every = std::chrono::seconds(30);  // a long check is seen to move
  app.add_option("--launch", c.program.launch,
                 "spawn: start the ranks here on loopback; threads: run them as threads of this process "
                 "(fastest, for pre-commit hooks; no stop detection); env: join a world made by "
                 "torchrun/srun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
      ->capture_default_str();
  app.add_option("--backend", backend, "gloo (CPU); nccl is reserved for CUDA builds (not available yet)")
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "seconds before a collective gives up on a peer")->capture_default_str();
  TraceOptions trace;
  add_trace_flags(app, trace);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    early_exit = kExitOk;
    return c;
  } catch (const CLI::ParseError& e) {
    throw InputError(str_cat(e.what(), " (run with --help for usage)"));
  }
  if (c.list_mutations) {
    list_mutations(std::cout);
    early_exit = kExitOk;
    return c;
  }
  if (topology.empty()) throw InputError("--topology is required (for example --topology dp=4)");
  if (dist::is_bridge_topology(topology) && explain_layout) {
    std::cout << dist::explain_bridge_layout(dist::BridgeTopology::parse(topology));
    early_exit = kExitOk;
    return c;
  }
  s.topology = dist::TopologySpec::parse(topology);
  if (!run_config.empty()) {
    // The config fixes these; a flag that disagrees with it would check a different run.
    for (const char* flag :
         {"--dtype", "--loss-scale", "--reduce-dtype", "--optimizer", "--batch", "--seed", "--label-smoothing"}) {
      if (app.count(flag) > 0) {
        throw InputError(str_cat(flag, ": comes from --config ", run_config, " (edit the config to change it)"));
      }
    }
    require_mesh_topology(s.topology, "--config");
    if (!model.empty()) throw InputError(str_cat("--model: comes from --config ", run_config, " (its model.path)"));
  }
  if (!model.empty()) {
    require_mesh_topology(s.topology, "--model");
    // Absolute: the workload's paths are resolved against the fixtures, not the working directory.
    s.model_folder = std::filesystem::absolute(model).lexically_normal().string();
  }
  // 0 stands for "the default batch" inside CheckSettings; given on the command line it is an error.
  if (app.count("--batch") > 0 && s.batch_size < 1) {
    throw InputError(str_cat("--batch: expected an integer >= 1, got ", s.batch_size));
  }
  s.precision = PrecisionPolicy::for_compute(parse_dtype(dtype, "--dtype"));
  if (loss_scale != 0) s.precision.loss_scale = loss_scale;
  if (!reduce_dtype.empty()) s.precision.reduce = parse_dtype(reduce_dtype, "--reduce-dtype");
  s.precision.validate("--dtype " + dtype);
  s.convention = dist::parse_convention(convention);
  if (!checks_list.empty()) s.levels = checks::parse_levels(checks_list);
  if (!run_config.empty()) {
    if (s.steps < 1) throw InputError(str_cat("--steps: expected an integer >= 1, got ", s.steps));
    checks::apply_run_config(s, std::make_shared<const RunConfig>(RunConfig::load(run_config)));
  }
  if (seed < 0) throw InputError("--seed: expected an integer >= 0");
  if (run_config.empty()) s.seed = static_cast<uint64_t>(seed);
  s.backend = dist::parse_backend(backend);
  if (!(timeout_s > 0)) throw InputError("--timeout: expected seconds > 0");
  s.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  c.program.topology = s.topology;
  c.program.backend = s.backend;
  c.program.timeout = s.timeout;
  c.program.validate();
  c.trace = checked_trace_flags(app, trace, timeout_s);
  if (c.trace && c.program.launch == "threads") {
    throw InputError(str_cat(trace.port ? "--trace-port" : "--trace-file",
                             ": not with --launch threads (its rank threads share one process's trace points); use "
                             "--launch spawn"));
  }
  // Rank 0 binds its server once the ranks start, after the launcher's reference: a port in use
  // is refused now instead.
  if (trace.port && *trace.port != 0 && !dist::running_as_rank()) require_trace_port_free(trace.bind, *trace.port);
  if (bite && !mutate.empty()) throw InputError("--bite and --mutate: give one or the other");
  if (bite) c.request.mode = checks::CheckMode::kBite;
  if (!mutate.empty()) {
    checks::find_mutation(mutate, s.topology, s.levels, s.precision, checks::run_traits(s));
    c.request.mode = checks::CheckMode::kMutate;
    c.request.mutation = mutate;
  }
  const auto plan = checks::plan_bite(s.topology, s.levels, s.precision, checks::run_traits(s));
  if (bite && plan.run.empty()) {
    std::vector<std::string> why;
    for (const auto& skip : plan.skipped) why.push_back(skip.mutation + ": " + skip.reason);
    throw InputError(str_cat("--bite: no mutation can run on ", s.topology.str(), " (", join(why, "; "), ")"));
  }
  s.validate();
  if (explain_layout) {
    if (s.topology.family() != dist::TopologyFamily::kMesh) {
      throw InputError(
          str_cat("--explain-layout: explains mesh layouts (dp=D[,cp=C][,tp=T][,fsdp=F][,mb=M]); --topology ",
                  s.topology.str(), " is a three-pool layout"));
    }
    std::cout << dist::explain_mesh_layout(s.topology);
    early_exit = kExitOk;
    return c;
  }
  s.record_reference = true;  // this process computes the reference on one thread
  c.mutation_runs = bite ? static_cast<int64_t>(plan.run.size()) : 0;
  require_writable_file(c.json_path, "--json");
  require_writable_file(c.junit_path, "--junit");
  return c;
}

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

int run_rank(const Command& c, const dist::Runtime& runtime) {
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
void write_failure_reports(const Command& c, const std::string& why, const dist::RankFailure* blamed = nullptr) {
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
  std::unique_ptr<Command> parsed;  // set once the flags are known good: from then on every exit writes reports
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
    parsed = std::make_unique<Command>(parse(argc, argv, early_exit));
    if (early_exit >= 0) return early_exit;
    Command& command = *parsed;
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
