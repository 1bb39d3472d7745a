// magic-run: real MAGIC attribution on real data. Trains the configured model with checkpoints,
// evaluates the query loss, backpropagates through training with REPLAY, writes per-example (or
// per-token, per-query) scores and prints the most helpful and most harmful examples. With
// --export-plan it also writes the run's plan, for another implementation to replay (plan_export.h).
#include <ATen/Parallel.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <optional>

#include "lib/core/allocator.h"
#include "lib/core/caching_cpu_allocator.h"
#include "lib/core/error.h"
#include "lib/core/json_fields.h"
#include "lib/core/process_exit.h"
#include "lib/core/strings.h"
#include "lib/core/utf8.h"
#include "lib/distributed/parallel/mesh_dump.h"
#include "lib/distributed/parallel/mesh_explain.h"
#include "lib/distributed/runtime/console.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/distributed/runtime/rank_program.h"
#include "lib/io/atomic_folder.h"
#include "lib/io/output_path.h"
#include "lib/io/score_file.h"
#include "lib/live/live_tracer.h"
#include "lib/trace/dump_sink.h"
#include "lib/train/attribution.h"
#include "lib/train/attribution_html.h"
#include "lib/train/attribution_text.h"
#include "lib/train/bridged_lm.h"
#include "lib/train/distributed_lm.h"
#include "lib/train/finite_guard.h"
#include "lib/train/lds.h"
#include "lib/train/memory_estimate.h"
#include "lib/train/plan_export.h"
#include "lib/train/run_config.h"
#include "lib/train/run_folder.h"
#include "lib/train/run_record.h"
#include "tools/run_flags.h"
#include "tools/trace_flags.h"
#include "tools/viewer_assets.h"

namespace {

using namespace magic;

constexpr size_t kRowText = 90;  // bytes of text a row shows

// A ranking holds only the examples of its own sign (`order`, best first), and says when fewer
// than --top have it: "Most helpful (most negative score; 2 of the 3 examples lower the query
// loss):", or "...: none of the 3 examples lowers the query loss" (docs/magic-run.md).
void print_ranked(const std::string& title, const std::string& sign, const std::string& effect,
                  const at::Tensor& totals, const std::vector<int64_t>& order, const LmProblem& problem, size_t top) {
  const int64_t examples = totals.size(0);
  std::cout << title << " (most " << sign << " score";
  if (order.empty()) {
    std::cout << "): none of the " << examples << " examples " << effect << "s the query loss\n";
    return;
  }
  if (order.size() < top)
    std::cout << "; " << order.size() << " of the " << examples << " examples " << effect << " the query loss";
  std::cout << "):\n";
  for (size_t k = 0; k < std::min(top, order.size()); ++k) {
    const int64_t i = order[k];
    const Example& ex = problem.train->examples[i];
    std::cout << "  " << format_sci(totals[i].item<double>(), 3) << "  " << one_line_text(ex.id) << "  "
              << snippet(parts_text(example_parts(*problem.train, i, *problem.tokenizer)), kRowText) << "\n";
  }
}

// Every query with the index --query takes, so a reader knows what the scores are about.
void print_queries(const LmProblem& problem, const std::string& path) {
  constexpr size_t kShown = 20;  // a long query file is in the data; the terminal gets its start
  const size_t n = problem.query_documents.size();
  std::cout << "\nQueries (" << n << ", from " << path << "):\n";
  for (size_t q = 0; q < std::min(n, kShown); ++q) {
    const TextDocument& d = problem.query_documents[q];
    std::cout << "  " << q << "  " << one_line_text(d.id) << "  " << snippet(pair_text(d.prompt, d.text), kRowText)
              << "\n";
  }
  if (n > kShown) std::cout << "  ... and " << n - kShown << " more (every id in scores.safetensors' query_ids)\n";
}

void print_lds(const LdsResult& r, const LdsOptions& o) {
  const auto interval = [&](const LdsEstimate& e) {
    return str_cat(format_fixed(e.value, 3), " [", format_fixed(e.low, 3), ", ", format_fixed(e.high, 3), "]");
  };
  std::cout << "\nLDS (Spearman of the query loss change retraining shows vs the change the scores predict, "
            << o.subsets << " subsets each dropping " << format_fixed(100 * o.drop_fraction, 1) << "% of the examples; "
            << format_fixed(100 * o.level, 0) << "% bootstrap interval): " << interval(r.mean)
            << (r.columns.size() > 1 ? " (mean over queries)" : "") << "; " << format_fixed(r.seconds, 1) << " s\n";
  for (size_t c = 0; c < r.columns.size(); ++c)
    std::cout << "  " << r.columns[c] << ": " << interval(r.per_column[c]) << "\n";
}

// Rank 0 (or the single process) reports: the summary, the rankings, the LDS, the files.
void report(const RunFlags& f, const RunConfig& config, const Attribution& a, const std::optional<LdsResult>& lds,
            const std::string& layout) {
  const LmProblem& problem = a.problem;
  const MagicResult& result = a.result;
  std::cout << "query loss " << format_fixed(result.query_loss, 4) << "; training "
            << format_fixed(result.train_seconds, 2) << " s, REPLAY " << format_fixed(result.replay_seconds, 2)
            << " s; " << result.checkpoints << " checkpoints (" << format_fixed(result.checkpoint_bytes / 1048576.0, 2)
            << " MiB), at most " << result.peak_states_held << " states held\n";
  ScoreTable table;
  table.scores = result.scores;
  table.per_query = f.per_query;
  const bool pairs = !config.fields.prompt.empty();
  for (int64_t i = 0; i < problem.train->size(); ++i) {
    table.example_ids.push_back(problem.train->examples[i].id);
    if (!pairs) {
      table.example_texts.push_back(example_text(*problem.train, i, *problem.tokenizer));
      continue;
    }
    // scores.tsv's prompt and text columns: the example's tokens without loss and with it.
    std::string prompt, completion;
    for (const TextPart& part : example_parts(*problem.train, i, *problem.tokenizer))
      (part.prompt ? prompt : completion) += part.text;
    table.example_prompts.push_back(prompt);
    table.example_texts.push_back(completion);
  }
  for (const auto& q : problem.query_documents) table.query_ids.push_back(q.id);
  const int64_t shown_query = f.query_index.value_or(0);
  at::Tensor totals = example_totals(table);
  if (f.per_query) totals = totals[shown_query];
  // Each ranking holds the examples of its sign only, most negative (or most positive) first.
  const at::Tensor values = totals.to(at::kDouble).contiguous();
  const double* v = values.data_ptr<double>();
  std::vector<int64_t> helpful, harmful;
  for (int64_t i = 0; i < values.size(0); ++i) {
    if (v[i] < 0) helpful.push_back(i);
    if (v[i] > 0) harmful.push_back(i);
  }
  std::stable_sort(helpful.begin(), helpful.end(), [&](int64_t a, int64_t b) { return v[a] < v[b]; });
  std::stable_sort(harmful.begin(), harmful.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  const std::string query_name = f.per_query ? problem.query_documents[shown_query].id : "the query set";
  print_queries(problem, config.query_path);
  std::cout << "\nScores are dQ/dw: negative means up-weighting the example lowers the loss on " << query_name << ".\n";
  const std::string note = f.per_query ? ranking_note(problem, shown_query, f.query_index.has_value(),
                                                      f.out_dir.empty() ? "" : f.out_dir + "/scores.safetensors")
                                       : "";
  if (!note.empty()) std::cout << note << "\n";
  print_ranked("Most helpful", "negative", "lower", totals, helpful, problem, static_cast<size_t>(f.top));
  print_ranked("Most harmful", "positive", "raise", totals, harmful, problem, static_cast<size_t>(f.top));
  if (lds) print_lds(*lds, *f.lds);
  std::optional<HtmlReport> html;
  if (f.html) {
    AttributionPage page;
    page.config_path = config.source;
    page.config_json = config.resolved.dump(2);  // as read (JSON or YAML), the overrides set
    page.layout = layout;
    page.train_path = config.train_path;
    page.model = model_summary(config, problem.model);
    page.data_format = data_format_summary(config);
    page.dtype = config.precision.str();
    page.ranking_note = note;
    if (f.per_query) page.shown_query = shown_query;
    page.top = std::max<int64_t>(f.top, 10);
    if (lds) {
      HtmlLds h{
          lds->mean.value, lds->mean.low, lds->mean.high, f.lds->level, f.lds->subsets, f.lds->drop_fraction, {}, {}};
      for (size_t c = lds->columns.size() > 1 ? 1 : 0; c < lds->columns.size(); ++c) {
        h.query_ids.push_back(lds->columns[c]);
        h.per_query.push_back(lds->per_column[c].value);
      }
      page.lds = h;
    }
    html = attribution_html(a, table, page);
    // What the model learned, beside the non-smooth warning (lib/train/learning_health.h).
    html->facts.emplace_back("learning", learning_summary(a.learning));
    if (a.learning_warning)
      html->warning = html->warning ? *html->warning + " " + *a.learning_warning : *a.learning_warning;
  }
  if (f.out_dir.empty()) return;
  // The run's files replace the last run's together, or not at all (atomic_folder.h).
  replace_folder_atomically(f.out_dir, "--out", kOutFiles, [&](const std::string& temp) {
    write_score_files(temp, table);
    write_run_record(temp, run_record(config, f.command, f.program ? f.program->topology.str() : ""));
    if (html) write_html_report(temp + "/report.html", *html);
  });
  std::cout << "\nwrote " << f.out_dir << "/scores.safetensors, " << f.out_dir << "/scores.tsv and " << f.out_dir
            << "/run.json\n";
  if (html) std::cout << "wrote " << f.out_dir << "/report.html\n";
}

std::string layout_of(const RunFlags& f) {
  return f.program ? f.program->topology.str() : "single process";
}

// Every resume flag needs a spill_dir; the folder itself is checked and locked here (exit 2 at once).
std::optional<RunFolderLease> acquire_run_folder(const RunFlags& f, const RunConfig& config) {
  if (!config.spill_dir) {
    if (f.resume == ResumeMode::kResume) require_spill_dir(config, "--resume");
    if (f.resume == ResumeMode::kRestart) require_spill_dir(config, "--restart");
    if (f.keep_checkpoints) require_spill_dir(config, "--keep-checkpoints");
    return std::nullopt;
  }
  return RunFolderLease::acquire(*config.spill_dir, run_identity(config, f.config_path, layout_of(f), f.per_query),
                                 f.resume, &std::cerr);
}

// Runs `body` and then removes the run's folder or keeps it for --resume (run_folder.h).
int settling(std::optional<RunFolderLease>& lease, const RunFlags& f, const std::function<int()>& body) {
  const auto settle = [&](RunOutcome outcome) {
    if (lease) settle_run_folder(*lease, outcome, f.keep_checkpoints, std::cerr);
  };
  try {
    const int rc = body();
    settle(RunOutcome::kFinished);
    return rc;
  } catch (const NonFiniteError&) {
    settle(RunOutcome::kHopeless);
    throw;
  } catch (...) {
    settle(RunOutcome::kInterrupted);
    throw;
  }
}

// This rank's run folder: made by our launcher (MAGIC_RUN_FOLDER), or, under torchrun/srun, by
// rank 0 while the others wait to hear whether it could.
std::optional<std::string> rank_run_folder(const RunFlags& f, const RunConfig& config, const dist::Runtime& runtime,
                                           std::optional<RunFolderLease>& lease) {
  if (!config.spill_dir) return std::nullopt;
  if (f.program->launch == "spawn") {
    const char* made = std::getenv("MAGIC_RUN_FOLDER");
    if (made == nullptr) throw std::logic_error("the launcher did not pass MAGIC_RUN_FOLDER");
    return rank_folder_path(made, runtime.rank());
  }
  std::optional<std::string> failure;
  if (runtime.rank() == 0) {
    try {
      lease = acquire_run_folder(f, config);
    } catch (const InputError& e) {
      failure = e.what();
    }
  }
  const at::Tensor ok = at::tensor({static_cast<int64_t>(!failure)}, at::kLong);
  if (runtime.world()->all_gather(ok, 0).min().item<int64_t>() == 0) {
    if (failure) throw InputError(*failure);
    throw InputError("rank 0 could not open the run's folder in training.spill_dir (its message says why)");
  }
  if (lease) return rank_folder_path(lease->path(), runtime.rank());  // rank 0: hashed the data once already
  const RunIdentity id = run_identity(config, f.config_path, layout_of(f), f.per_query);
  return rank_folder_path(run_folder_path(*config.spill_dir, id), runtime.rank());
}

// What needs the built problem: per-query REPLAY's cotangents (its queries) and --dump's records,
// held until the run ends. With them counted, the run must still fit (each rank holds its shards;
// ranks our launcher spawned share this machine). `memory` gains them.
void require_problem_memory(const RunFlags& f, const RunConfig& config, const dist::Runtime* runtime,
                            const LmProblem& problem, MemoryEstimate& memory) {
  if (!f.per_query && f.dump_dir.empty()) return;
  if (f.per_query) {
    add_per_query_replay(config, problem.query->num_queries(), f.query_batch.value_or(1), problem.weights.numel(),
                         memory, f.retrace_per_query);
  }
  DumpShards shards;
  int64_t ranks = 1;
  if (runtime) {
    const dist::TopologySpec& t = f.program->topology;
    shards = {t.dp(), t.cp(), t.fsdp()};
    if (f.program->launch == "spawn") ranks = t.world_size();
  }
  if (!f.dump_dir.empty()) {
    memory.dump_bytes = estimate_dump_bytes(config, problem.weights.numel(), problem.query->num_queries(), shards);
  }
  require_memory(config, memory, available_memory_bytes(), ranks);
}

// Writes the records: one process's file and manifest, or every rank's file and rank 0's manifest
// (dist::write_mesh_dump). A dump that cannot be written fails the run.
void write_dump(const RunFlags& f, const dist::Runtime* runtime, const Parallelism& parallelism,
                const std::vector<DumpSink::Entry>& entries) {
  if (runtime == nullptr) {
    write_single_process_dump(f.dump_dir, f.config_path, entries);
  } else {
    dist::PhaseScope phase("writing the dump");
    const std::string failure =
        dist::write_mesh_dump(f.dump_dir, f.config_path, entries, *runtime->world(), parallelism.trace_layout());
    if (!failure.empty()) throw std::runtime_error("--dump: " + failure);
    if (runtime->rank() != 0) return;
  }
  std::cout << "dump: " << entries.size() << " records" << (runtime ? " per rank" : "") << " in " << f.dump_dir << "\n";
}

// Who the tracer's records come from: the run, this rank and its place in the mesh.
TraceOrigin trace_origin(const RunFlags& f, const dist::Runtime* runtime, const Parallelism& parallelism) {
  TraceOrigin o;
  o.run = f.config_path;
  if (runtime) {
    o.rank = runtime->rank();
    o.ranks = runtime->world_size();
    o.mesh = parallelism.trace_layout().mesh;
    o.coords = parallelism.trace_layout().coords;
  }
  return o;
}

// The attribution, its validation and its report, once the run's folder is settled.
int attribute_with(const RunFlags& f, const RunConfig& config, const dist::Runtime* runtime, LmProblem problem,
                   const AttributionOptions& options) {
  const Attribution a = run_attribution(config, std::move(problem), options);
  std::optional<LdsResult> lds;
  if (f.lds) {
    LdsOptions o = *f.lds;
    o.seed = config.seed;
    o.progress = options.progress;
    o.terminal = options.terminal;
    lds = validate_lds(a.problem, a.result.scores, f.per_query, o);
  }
  if (runtime == nullptr || runtime->rank() == 0) report(f, config, a, lds, layout_of(f));
  return kExitOk;
}

// Whether `config` can run on `topology`, before any rank starts (and again on each rank, for ranks
// torchrun or srun started): a bridge layout needs a multimodal config that fits it; a multimodal
// config on more than one rank needs a bridge layout.
void require_layout_fits(const dist::TopologySpec& topology, const RunConfig& config, const std::string& config_path) {
  if (topology.is_bridge()) {
    require_bridge_fits(topology, config.model, config.encoder ? &*config.encoder : nullptr, config.batch_size,
                        "training.batch_size");
    return;
  }
  if (config.encoder && topology.world_size() > 1) {
    throw InputError(str_cat(config_path, ": a multimodal run (its \"encoder\" section) on ", topology.world_size(),
                             " ranks runs its encoder and language model on a bridge layout: --topology "
                             "'enc=tpA,dpB;lm=tpC,dpD,cpE', not ",
                             topology.str()));
  }
  require_micro_batches_fit(topology, config.batch_size, "training.batch_size");
  require_tensor_parallel_fits(topology, config.model);
  require_pipeline_fits(topology, config.model);
  require_ring_fits(topology, config.model, "the config's model");
}

// Whether this build, this machine and the backend can run on the config's device (run_device.h):
// NCCL moves GPU memory only, a GPU for each rank.
void require_device_fits(const RunConfig& config, const std::optional<dist::RankProgram>& program) {
  require_device(config.device, config.where("device"));
  if (!program || program->backend != dist::BackendKind::kNccl) return;
  if (config.device != DeviceKind::kCuda) {
    throw InputError(str_cat("--backend nccl: NCCL moves GPU memory, and the run's device is cpu (",
                             config.where("device"), "); set --device cuda"));
  }
  require_gpu_per_rank(program->topology.world_size(), cuda_devices(), "--topology " + program->topology.str());
}

// The whole run on one process or one rank (`runtime` set).
int attribute(const RunFlags& f, const dist::Runtime* runtime) {
  const RunConfig config = RunConfig::load(f.config_path, f.overrides);
  require_device_fits(config, f.program);
  if (!f.plan_dir.empty()) require_plan_expressible(config, "--export-plan");
  const bool speaks = runtime == nullptr || runtime->rank() == 0;
  // One process splits its threads between REPLAY's products and its recomputation; a rank's
  // steps run collectives, which one thread must issue in order (replay_mode.h).
  const int threads = at::get_num_threads();
  // A checkpoint budget holds one segment's states at a time: sequential (checkpoint_plan.h).
  const ReplayMode replay_mode = config.checkpoints == CheckpointSchedule::kBudget
                                     ? ReplayMode::kSequential
                                     : choose_replay_mode(/*step_runs_collectives=*/runtime != nullptr, threads);
  MemoryEstimate memory = estimate_run_memory(config, replay_mode);
  // Ranks our launcher spawned were checked together before they started.
  if (runtime == nullptr || f.program->launch == "env") require_memory(config, memory, available_memory_bytes());
  std::shared_ptr<const Parallelism> parallelism = std::make_shared<SingleProcess>();
  std::shared_ptr<const PrefixEncoder> prefix;  // a multimodal run's on a bridge layout
  if (runtime) {
    // Checked by the launcher before its ranks started; again here for ranks torchrun or srun started.
    require_layout_fits(f.program->topology, config, f.config_path);
    if (f.program->topology.is_bridge()) {
      const BridgedLm bridged = bridged_lm(
          *runtime, bridged_lm_parts(*runtime, f.program->topology, config.model, *config.encoder), *config.encoder);
      parallelism = bridged.parallelism;
      prefix = bridged.prefix;
    } else {
      parallelism = lm_data_parallel(*runtime, f.program->topology, config.model);
    }
  }
  AttributionOptions options;
  options.per_query = f.per_query;
  options.query_batch = f.query_batch.value_or(1);
  options.retrace_per_query = f.retrace_per_query;
  options.replay_mode = replay_mode;
  if (f.lds) options.lds_retrainings = lds_retrainings(*f.lds);
  // Progress on the user's stderr, in one process and from rank 0 (whose own stderr is its log).
  if (speaks) {
    options.progress = &dist::console();
    options.terminal = isatty(dist::console_fd()) != 0;
  }
  // The tracer's server binds now, so a port in use is refused before the data is loaded.
  std::optional<LiveTracer> tracer;
  if (f.trace) {
    tracer.emplace(*f.trace, trace_origin(f, runtime, *parallelism), viewer_assets(), trace_relay(runtime),
                   speaks ? &std::cout : nullptr);
  }
  LmProblem problem =
      build_lm_problem(config, parallelism, nullptr,
                       runtime ? std::make_shared<MicroBatches>(f.program->topology.mb()) : nullptr, prefix);
  if (tracer) {
    std::vector<std::string> ids;
    for (const Example& ex : problem.train->examples) ids.push_back(ex.id);
    tracer->sink()->set_example_ids(std::move(ids));
  }
  const int64_t queries = problem.query->num_queries();
  require_problem_memory(f, config, runtime, problem, memory);
  if (f.lds) lds_dropped_count(*f.lds, problem.train->size());
  if (f.query_index && *f.query_index >= queries) {
    throw InputError(str_cat("--query ", *f.query_index, ": expected an index below the ", queries, " queries"));
  }
  // The run's folder is checked (and locked) after the other inputs, before anything is printed or trained.
  std::optional<RunFolderLease> lease;
  if (runtime == nullptr) {
    lease = acquire_run_folder(f, config);
    if (lease) options.resume_folder = rank_folder_path(lease->path(), 0);
  } else {
    options.resume_folder = rank_run_folder(f, config, *runtime, lease);
    const std::shared_ptr<dist::Group> world = runtime->world();
    options.least_across_ranks = [world](int64_t value) {
      return world->all_gather(at::tensor({value}, at::kLong), 0).min().item<int64_t>();
    };
    // Over the ranks that split the batch: tp ranks hold the same rows' losses, counted once.
    options.sum_across_ranks = [parallelism](at::Tensor& values) { values = parallelism->sum_across_ranks(values); };
  }
  if (speaks) {
    std::cout << "magic-run: " << examples_summary(*problem.train, config.train_path) << ", " << queries << " queries, "
              << config.steps << " steps of " << config.batch_size << ", " << config.optimizer.name << ", "
              << plan_summary(config.checkpoints, run_checkpoint_plan(config, replay_mode), config.checkpoint_budget)
              << ", " << config.precision.str()
              << (config.device == DeviceKind::kCuda ? " on " + current_device(config.device).str() : std::string())
              << (replay_mode == ReplayMode::kPipelined ? str_cat(", REPLAY pipelined on ", threads, " threads") : "")
              << (runtime ? ", on " + f.program->topology.str() : std::string()) << "; estimated peak memory "
              << memory.str() << (runtime ? " per rank" : "") << std::endl;
    if (config.model_folder) {
      std::cout << "model: " << model_summary(config, problem.model)
                << "; tokenizer: " << problem.tokenizer->description() << std::endl;
    }
  }
  // Trace records are kept while the run goes (lib/trace) and written once it has finished; the
  // tracer streams the ones its control selects as they are made (lib/live).
  std::optional<DumpSink> sink;
  if (tracer) tracer->wait_for_client(speaks ? &std::cout : nullptr);
  std::vector<TraceSink*> sinks;
  if (!f.dump_dir.empty()) sinks.push_back(&sink.emplace());
  if (tracer) sinks.push_back(tracer->sink());
  TeeSink both(sinks);
  std::optional<ScopedTraceSink> listening;
  if (sinks.size() == 1) listening.emplace(sinks[0]);
  if (sinks.size() > 1) listening.emplace(&both);
  const int rc = settling(lease, f, [&] {
    // The plan is read off the problem just built (the batches the step will consume), before
    // training, so another implementation can start on it while this run trains. Written once the
    // run's folder is settled: a run refused for its folder has written no plan either, and a
    // plan that cannot be written leaves that folder as an interrupted run with no work would.
    if (!f.plan_dir.empty()) {
      export_plan(f.plan_dir, config, problem, PlanOptions{f.per_query, f.config_path});
      std::cout << "wrote the run's plan to " << f.plan_dir << " (docs/plan-format.md)" << std::endl;
    }
    return attribute_with(f, config, runtime, std::move(problem), options);
  });
  listening.reset();
  if (tracer) tracer->finish(rc == kExitOk ? "finished" : "failed");
  if (sink && rc == kExitOk) write_dump(f, runtime, *parallelism, sink->entries());
  return rc;
}

// --explain-layout: the layout's ranks and groups, once the config and the layout are known to fit
// each other (docs/magic-check.md, "Explaining a layout"); nothing is run.
int explain_layout(const RunFlags& f) {
  const RunConfig config = RunConfig::load(f.config_path, f.overrides);
  require_layout_fits(f.program->topology, config, f.config_path);
  std::cout << (f.program->topology.is_bridge() ? dist::explain_bridge_layout(f.program->topology.bridge())
                                                : dist::explain_mesh_layout(f.program->topology));
  return kExitOk;
}

int run_main(int argc, char** argv);

int run(int argc, char** argv) {
  int early_exit = -1;
  RunFlags flags = parse_run_flags(argc, argv, early_exit);
  if (early_exit >= 0) return early_exit;
  if (flags.program) flags.program->entry = run_main;
  if (!flags.program) return attribute(flags, nullptr);
  if (flags.explain_layout) return explain_layout(flags);
  if (!dist::running_as_rank()) {
    // Load the config here too, so a bad one is reported once, before any rank starts.
    const RunConfig config = RunConfig::load(flags.config_path, flags.overrides);
    require_layout_fits(flags.program->topology, config, flags.config_path);
    require_device_fits(config, flags.program);
    require_memory(config, estimate_run_memory(config), available_memory_bytes(), flags.program->topology.world_size());
    std::optional<RunFolderLease> lease = acquire_run_folder(flags, config);
    if (lease) setenv("MAGIC_RUN_FOLDER", lease->path().c_str(), 1);
    const int rc = dist::run_rank_program(*flags.program, argc, argv, [](const dist::Runtime&) { return kExitOk; });
    // The launcher's exit code: 0 scores written, 1 stopped on a non-finite value, 2 a rank failed.
    if (lease) {
      settle_run_folder(*lease,
                        rc == kExitOk            ? RunOutcome::kFinished
                        : rc == kExitCheckFailed ? RunOutcome::kHopeless
                                                 : RunOutcome::kInterrupted,
                        flags.keep_checkpoints, std::cerr);
    }
    return rc;
  }
  return dist::run_rank_program(*flags.program, argc, argv,
                                [&](const dist::Runtime& runtime) { return attribute(flags, &runtime); });
}

// main(), also entered by each spawned rank forked from the launcher (RankProgram::entry).
int run_main(int argc, char** argv) {
  const bool rank = dist::running_as_rank();
  const std::string who = rank ? str_cat("magic-run: rank ", std::getenv("RANK")) : "magic-run";
  // One line for the user (the launcher relays a rank's last line); a backtrace goes to the rank's log.
  const auto say = [&](const char* kind, const std::exception& e, const char* tail = "") {
    const std::string line = dist::one_line_error(e);
    if (line != e.what()) dist::note_in_rank_log(e.what());
    std::cerr << who << ": " << kind << ": " << line << tail << std::endl;
  };
  try {
    return run(argc, argv);
  } catch (const InputError& e) {
    say("error", e);
    return kExitBadInput;
  } catch (const NonFiniteError& e) {
    // Every rank sees the same reduced values and stops at the same place; rank 0 reports.
    if (rank && std::string(std::getenv("RANK")) != "0") return kExitOk;
    say("stopped", e, "; no scores written");
    return kExitCheckFailed;
  } catch (const DistributedError& e) {
    say("distributed failure", e);
    return kExitBadInput;
  } catch (const std::exception& e) {
    say("failed", e);
    return kExitBadInput;
  }
}

}  // namespace

int main(int argc, char** argv) {
  magic::keep_freed_memory_in_process();                         // lib/core/allocator.h
  magic::install_caching_cpu_allocator();                        // lib/core/caching_cpu_allocator.h
  magic::exit_without_static_destructors(run_main(argc, argv));  // lib/core/process_exit.h
}
