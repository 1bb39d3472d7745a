#include "tools/check_command.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <vector>

#include "checks/mutations.h"
#include "lib/core/dtype.h"
#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/mesh_explain.h"
#include "lib/distributed/parallel/pipeline_schedule.h"
#include "lib/distributed/runtime/bridge_topology.h"
#include "lib/io/output_path.h"
#include "lib/live/trace_server.h"
#include "lib/train/distributed_lm.h"

namespace magic {

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
CheckCommand parse_check_command(int argc, char** argv, int& early_exit) {
  CheckCommand c;
  auto& s = c.request.settings;
  std::string topology, schedule = "1f1b", dtype = "fp64", convention = "sum", checks_list, mutate, backend = "gloo",
                        device = "cpu";
  double timeout_s = 60;
  int64_t seed = 0;
  bool bite = false;
  CLI::App app{
      "magic-check: check a distributed MAGIC pipeline against a single-process reference.\n"
      "Example: magic-check --topology dp=4 --bite --json report.json\n"
      "Mesh layouts check a small GPT on the KJV fixture; three-pool layouts a small decomposition."};
  app.add_option("--topology", topology,
                 "layout, key=value[,...]: mesh dp=D[,cp=C][,tp=T][,fsdp=F][,pp=P][,vpp=V][,mb=M], or three pools "
                 "n_ci=A,n_per_block=B[,n_blocks=2][,n_ppgd=2]");
  app.add_option("--schedule", schedule, "with pp > 1: the pipeline's schedule, 1f1b or gpipe")->capture_default_str();
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
  app.add_option("--device", device, "cpu | cuda: where the distributed run computes (the reference: the host)")
      ->capture_default_str();
  app.add_option("--backend", backend,
                 "gloo (host memory; ranks may share a GPU) or nccl (--device cuda, a GPU a rank)")
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
  dist::parse_pipeline_schedule(schedule, "--schedule");
  s.topology.schedule = schedule;
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
  s.device = parse_device(device, "--device");
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
}  // namespace magic
