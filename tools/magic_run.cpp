// magic-run: real MAGIC attribution on real data. Trains the configured model with checkpoints,
// evaluates the query loss, backpropagates through training with REPLAY, writes per-example (or
// per-token, per-query) scores and prints the most helpful and most harmful examples.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/output_path.h"
#include "lib/io/score_file.h"
#include "lib/train/finite_guard.h"
#include "lib/train/magic_pipeline.h"
#include "lib/train/memory_estimate.h"
#include "lib/train/progress_meter.h"
#include "lib/train/run_config.h"

namespace {

using namespace magic;

std::string snippet(const std::string& text, size_t width) {
  return text.size() <= width ? text : text.substr(0, width - 3) + "...";
}

void print_ranked(const char* title, const at::Tensor& totals, const std::vector<int64_t>& order,
                  const LmProblem& problem, size_t top) {
  std::cout << title << "\n";
  for (size_t k = 0; k < std::min(top, order.size()); ++k) {
    const int64_t i = order[k];
    const Example& ex = problem.train->examples[i];
    std::cout << "  " << format_sci(totals[i].item<double>(), 3) << "  " << ex.id << "  "
              << snippet(problem.train_documents[ex.document].text, 90) << "\n";
  }
}

int run(int argc, char** argv) {
  CLI::App app{
      "magic-run: MAGIC data attribution (metagradients through the whole training run).\n"
      "Example: magic-run --config fixtures/runs/demo.json --out out/demo"};
  std::string config_path, out_dir;
  int64_t top = 5;
  bool per_query = false;
  std::optional<int64_t> query_index;
  app.add_option("--config", config_path, "run configuration (JSON; see README 'magic-run configuration')")->required();
  app.add_option("--out", out_dir, "directory for scores.safetensors and scores.tsv (not written if omitted)");
  app.add_option("--top", top, "how many helpful and harmful examples to print")->capture_default_str();
  app.add_flag("--per-query", per_query, "one REPLAY per query: scores [queries, examples]");
  app.add_option("--query", query_index, "rank examples for this query index (with --per-query)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "magic-run: " << e.what() << "\n"
              << "Run with --help for usage.\n";
    return kExitBadInput;
  }

  // Flags and the output directory before anything is loaded or trained.
  if (top < 0) throw InputError(str_cat("--top ", top, ": expected a count >= 0"));
  if (query_index && !per_query) {
    throw InputError(str_cat("--query ", *query_index, ": needs --per-query (one REPLAY per query)"));
  }
  if (query_index && *query_index < 0) throw InputError(str_cat("--query ", *query_index, ": expected an index >= 0"));
  if (!out_dir.empty()) require_writable_directory(out_dir, "--out");

  const RunConfig config = RunConfig::load(config_path);
  const MemoryEstimate memory = estimate_run_memory(config);
  require_memory(config, memory, available_memory_bytes());
  const LmProblem problem = build_lm_problem(config);
  if (query_index && *query_index >= problem.query->num_queries()) {
    throw InputError(
        str_cat("--query ", *query_index, ": expected an index below the ", problem.query->num_queries(), " queries"));
  }
  const int64_t shown_query = query_index.value_or(0);
  std::cout << "magic-run: " << problem.train->size() << " examples from " << config.train_path << ", "
            << problem.query->num_queries() << " queries, " << config.steps << " steps of " << config.batch_size << ", "
            << config.optimizer.name << ", " << checkpoint_schedule_name(config.checkpoints) << " checkpoints, "
            << config.precision.str() << "; estimated peak memory " << memory.str() << "\n";
  MagicOptions options;
  options.schedule = config.checkpoints;
  options.spill_dir = config.spill_dir;
  options.per_query = per_query;
  options.stop_on_non_finite = true;
  // Progress on stderr: a bar on a terminal, a line every 5 s otherwise; each phase closes with a
  // summary. REPLAY's meter starts with its first step (after training and the query gradient).
  const bool terminal = isatty(STDERR_FILENO) != 0;
  const int64_t steps = problem.step->num_steps();
  const int64_t replay_steps = steps * (per_query ? problem.query->num_queries() : 1);
  ProgressMeter training("training", steps, std::cerr, terminal);
  std::optional<ProgressMeter> replay;
  int64_t replayed = 0;
  options.on_step = [&](int64_t t, const TrainState&, const StepOutput&) {
    training.update(t + 1);
    if (t + 1 == steps) training.finish();
  };
  options.on_replay_step = [&](int64_t, const StepVjp&) {
    if (!replay) replay.emplace("REPLAY", replay_steps, std::cerr, terminal);
    replay->update(++replayed);
    if (replayed == replay_steps) replay->finish();
  };
  MagicResult result = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  std::cout << "query loss " << format_fixed(result.query_loss, 4) << "; training "
            << format_fixed(result.train_seconds, 2) << " s, REPLAY " << format_fixed(result.replay_seconds, 2)
            << " s; " << result.checkpoints << " checkpoints (" << format_fixed(result.checkpoint_bytes / 1048576.0, 2)
            << " MiB), at most " << result.peak_states_held << " states held\n";

  ScoreTable table;
  table.scores = result.scores;
  table.per_query = per_query;
  for (const auto& ex : problem.train->examples) {
    table.example_ids.push_back(ex.id);
    table.example_texts.push_back(problem.train_documents[ex.document].text);
  }
  for (const auto& q : problem.query_documents) table.query_ids.push_back(q.id);
  at::Tensor totals = example_totals(table);
  if (per_query) totals = totals[shown_query];
  std::vector<int64_t> order(totals.size(0));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return totals[a].item<double>() < totals[b].item<double>(); });
  std::string query_name = per_query ? problem.query_documents[shown_query].id : "the query set";
  std::cout << "\nScores are dQ/dw: negative means up-weighting the example lowers the loss on " << query_name << ".\n";
  print_ranked("Most helpful (most negative score):", totals, order, problem, static_cast<size_t>(top));
  std::reverse(order.begin(), order.end());
  print_ranked("Most harmful (most positive score):", totals, order, problem, static_cast<size_t>(top));
  if (!out_dir.empty()) {
    write_score_files(out_dir, table);
    std::cout << "\nwrote " << out_dir << "/scores.safetensors and " << out_dir << "/scores.tsv\n";
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const magic::InputError& e) {
    std::cerr << "magic-run: error: " << e.what() << "\n";
    return magic::kExitBadInput;
  } catch (const magic::NonFiniteError& e) {
    std::cerr << "magic-run: stopped: " << e.what() << "; no scores written\n";
    return magic::kExitCheckFailed;
  } catch (const std::exception& e) {
    std::cerr << "magic-run: failed: " << e.what() << "\n";
    return magic::kExitBadInput;
  }
}
