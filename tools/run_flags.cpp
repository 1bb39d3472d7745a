#include "tools/run_flags.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/pipeline_schedule.h"
#include "lib/distributed/runtime/topology.h"
#include "lib/io/atomic_folder.h"
#include "lib/io/output_path.h"
#include "lib/train/distributed_lm.h"
#include "lib/train/run_config.h"

namespace magic {

const std::vector<std::string> kOutFiles = {"scores.safetensors", "scores.tsv", "run.json", "report.html"};

namespace {

// Whether one of the two paths is the other or lies inside it.
bool nested(const std::string& a, const std::string& b) {
  const auto normal = [](const std::string& p) {
    std::filesystem::path n = std::filesystem::absolute(p).lexically_normal();
    return n.filename().empty() ? n.parent_path() : n;
  };
  const std::filesystem::path x = normal(a), y = normal(b);
  const auto within = [](const std::filesystem::path& inner, const std::filesystem::path& outer) {
    const auto r = inner.lexically_relative(outer);
    return !r.empty() && *r.begin() != "..";
  };
  return within(x, y) || within(y, x);
}

// --export-plan describes a single-process run into a folder of its own (plan_export.h).
void check_plan_flags(const RunFlags& f) {
  if (f.program) {
    throw InputError(
        "--export-plan: a plan describes the single-process run; drop --topology (a distributed run's scores equal "
        "the single-process run's to summation order: docs/magic-run.md)");
  }
  if (!f.out_dir.empty() && nested(f.plan_dir, f.out_dir)) {
    throw InputError(str_cat("--export-plan ", f.plan_dir, " and --out ", f.out_dir,
                             ": name two separate directories (the plan's folder holds only the plan)"));
  }
  require_new_folder(f.plan_dir, "--export-plan");
}

}  // namespace

// Parses and checks every flag and the output directory before anything is loaded or trained.
RunFlags parse_run_flags(int argc, char** argv, int& early_exit) {
  RunFlags f;
  CLI::App app{
      "magic-run: MAGIC data attribution (metagradients through the whole training run).\n"
      "Example: magic-run --config fixtures/runs/demo.json --out out/demo\n"
      "Distributed: magic-run --config run.json --topology dp=4 (check it first: magic-check --config run.json "
      "--topology dp=4)"};
  std::string topology, schedule = "1f1b", backend = "gloo";
  bool resume = false, restart = false;
  dist::RankProgram program;
  program.name = "magic-run";
  double timeout_s = 60;
  app.add_option("--config", f.config_path,
                 "run configuration (JSON or YAML; every key in docs/magic-run.md; any key can be set on the command "
                 "line as --section.key VALUE)")
      ->required();
  app.add_option("--out", f.out_dir, "directory for scores.safetensors and scores.tsv (not written if omitted)");
  app.add_option("--top", f.top, "how many helpful and harmful examples to print")->capture_default_str();
  app.add_flag("--per-query", f.per_query,
               "scores per query, [queries, examples], every query in one REPLAY pass (each step recomputed and "
               "traced once)");
  app.add_option("--query", f.query_index, "rank examples for this query index (with --per-query)");
  app.add_option("--query-batch", f.query_batch,
                 "with --per-query: take this many queries' products in one backward pass (default 1; more "
                 "takes more memory, and pays where a step's kernels are small)");
  app.add_flag("--retrace-per-query", f.retrace_per_query,
               "with --per-query: trace each step again for every query (or --query-batch of them) instead of keeping "
               "its graph between the queries' products: a plain run's memory plus the queries' cotangents, about "
               "one more training step a query; the same scores");
  app.add_flag("--html", f.html, "also write a self-contained report.html into --out");
  app.add_option("--export-plan", f.plan_dir,
                 "also write the run's plan (initial weights, batches, optimizer settings, queries) into this new "
                 "or empty directory, for another implementation to replay (docs/plan-format.md)");
  std::string validate;
  LdsOptions lds;
  app.add_option("--validate", validate,
                 "lds: measure the linear datamodeling score by retraining without random subsets (docs/magic-run.md)");
  app.add_option("--subsets", lds.subsets, "with --validate lds: how many random subsets")->capture_default_str();
  app.add_option("--drop-fraction", lds.drop_fraction, "with --validate lds: the share of examples each drops")
      ->capture_default_str();
  app.add_flag("--resume", resume,
               "continue an interrupted run of this config from its checkpoints in training.spill_dir");
  app.add_flag("--restart", restart, "discard an interrupted run's checkpoints and begin again");
  app.add_option("--dump", f.dump_dir,
                 "write the run's trace records to this new folder, for magic-compare (docs/dump-format.md)");
  TraceOptions trace;
  add_trace_flags(app, trace);
  app.add_flag("--keep-checkpoints", f.keep_checkpoints,
               "keep the run's checkpoints in training.spill_dir when it ends (removed by default)");
  app.add_option("--topology", topology,
                 "run distributed on this mesh layout: dp=N[,cp=C][,tp=T][,fsdp=F][,pp=P][,vpp=V][,mb=M]");
  app.add_option("--schedule", schedule, "with a pp > 1 topology: the pipeline's schedule, 1f1b or gpipe")
      ->capture_default_str();
  app.add_flag("--explain-layout", f.explain_layout,
               "with --topology: print the layout's rank order and every rank's coordinates and groups, then exit "
               "without running (the config and the other flags are checked first)");
  app.add_option("--launch", program.launch,
                 "with --topology; spawn: start the ranks here on loopback; env: join a world made by "
                 "torchrun/srun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
      ->capture_default_str();
  app.add_option("--backend", backend,
                 "with --topology: gloo (host memory; ranks may share a GPU) or nccl (--device cuda, a GPU a rank)")
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "with --topology: seconds before a collective gives up on a peer")
      ->capture_default_str();
  app.allow_extras();  // --section.key VALUE overrides, read below
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    early_exit = kExitOk;
    return f;
  } catch (const CLI::ParseError& e) {
    throw InputError(str_cat(e.what(), " (run with --help for usage)"));
  }
  f.overrides = parse_overrides(app.remaining(), kRunConfigTopLevelKeys);
  f.command.assign(argv, argv + argc);
  if (f.top < 0) throw InputError(str_cat("--top ", f.top, ": expected a count >= 0"));
  if (f.query_index && !f.per_query) {
    throw InputError(str_cat("--query ", *f.query_index, ": needs --per-query (scores per query)"));
  }
  if (f.query_index && *f.query_index < 0) {
    throw InputError(str_cat("--query ", *f.query_index, ": expected an index >= 0"));
  }
  if (f.query_batch && !f.per_query) {
    throw InputError(str_cat("--query-batch ", *f.query_batch, ": needs --per-query"));
  }
  if (f.retrace_per_query && !f.per_query) throw InputError("--retrace-per-query: needs --per-query");
  if (f.query_batch && *f.query_batch < 1) {
    throw InputError(str_cat("--query-batch ", *f.query_batch, ": expected a count >= 1"));
  }
  if (!validate.empty()) {
    if (validate != "lds") throw InputError("--validate " + validate + ": expected lds");
    validate_lds_options(lds, "--subsets", "--drop-fraction");
    f.lds = lds;
  } else if (app.count("--subsets") + app.count("--drop-fraction") > 0) {
    throw InputError("--subsets and --drop-fraction: need --validate lds");
  }
  if (resume && restart) throw InputError("--resume and --restart: choose one");
  f.resume = resume ? ResumeMode::kResume : restart ? ResumeMode::kRestart : ResumeMode::kFresh;
  if (f.html && f.out_dir.empty()) throw InputError("--html: needs --out (report.html is written there)");
  if (!topology.empty()) {
    program.topology = dist::TopologySpec::parse(topology);
    dist::parse_pipeline_schedule(schedule, "--schedule");
    program.topology.schedule = schedule;
    require_mesh_topology(program.topology, "magic-run");
    program.backend = dist::parse_backend(backend);
    if (!(timeout_s > 0)) throw InputError("--timeout: expected seconds > 0");
    program.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    program.validate();
    f.program = program;
  } else {
    program.validate();  // --launch is checked even where one process runs
  }
  if (!f.out_dir.empty()) require_replaceable_folder(f.out_dir, "--out", kOutFiles);
  if (!f.dump_dir.empty()) require_new_folder(f.dump_dir, "--dump");  // a dump goes to a new folder
  if (app.count("--export-plan") > 0) check_plan_flags(f);
  f.trace = checked_trace_flags(app, trace, f.program ? std::optional<double>(timeout_s) : std::nullopt);
  // A dump places the encoder's records on a grid of their own (format version 3); the live
  // tracer's reassembly knows one mesh.
  if (f.program && f.program->topology.is_bridge() && f.trace) {
    throw InputError(str_cat("the live tracer (--trace-port, --trace-file) on a bridge layout (",
                             f.program->topology.str(),
                             "): the tracer places records on one mesh, and a bridge's encoder has its own (--dump "
                             "writes both)"));
  }
  if (f.explain_layout && !f.program)
    throw InputError("--explain-layout: needs --topology (one process has no layout)");
  return f;
}

}  // namespace magic
