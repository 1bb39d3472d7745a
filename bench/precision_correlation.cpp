// precision_correlation: what a precision policy does to attribution scores. Runs magic-run's
// single-process pipeline on one config under fp64 and under each lower policy and prints, for
// each, the Spearman and Pearson correlation of its per-example scores with the fp64 scores and
// the overlap of the 10 most helpful and 10 most harmful examples, with the run times.
//
//   precision_correlation [--config fixtures/runs/adamw_batch16.json] [--dtypes fp32,bf16,fp16]
#include <ATen/Parallel.h>

#include <iostream>
#include <sstream>

#include "bench/bench_flags.h"
#include "lib/compare/correlation.h"
#include "lib/core/allocator.h"
#include "lib/core/dtype.h"
#include "lib/core/strings.h"
#include "lib/train/magic_pipeline.h"
#include "lib/train/run_config.h"

namespace {

using namespace magic;

struct Run {
  at::Tensor scores;
  double query_loss, seconds;
};

Run run(RunConfig config, const PrecisionPolicy& precision) {
  config.precision = precision;
  const LmProblem problem = build_lm_problem(config);
  MagicOptions options;
  options.schedule = config.checkpoints;
  const MagicResult r = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  at::Tensor per_example = r.scores.dim() == 2 ? r.scores.sum(1) : r.scores;
  return {per_example.to(at::kDouble), r.query_loss, r.train_seconds + r.replay_seconds};
}

}  // namespace

int main(int argc, char** argv) {
  magic::keep_freed_memory_in_process();  // lib/core/allocator.h
  auto flags = magic::bench::parse_flags(
      argc, argv,
      {{"config", std::string(MAGIC_SOURCE_DIR) + "/fixtures/runs/adamw_batch16.json"}, {"dtypes", "fp32,bf16,fp16"}},
      "precision_correlation [--config run.json] [--dtypes fp32,bf16,fp16]");
  const std::string config_path = flags["config"], dtypes = flags["dtypes"];
  at::set_num_threads(1);
  const RunConfig config = RunConfig::load(config_path);
  const Run golden = run(config, PrecisionPolicy::for_compute(c10::kDouble));
  std::cout
      << "config " << config_path << ": " << golden.scores.numel() << " examples, " << config.steps
      << " steps; fp64 query loss " << format_fixed(golden.query_loss, 4) << ", " << format_fixed(golden.seconds, 1)
      << " s\n\n| policy | Spearman | Pearson | top-10 helpful overlap | top-10 harmful overlap | query loss | s |\n"
      << "|---|---:|---:|---:|---:|---:|---:|\n";
  std::stringstream list(dtypes);
  std::string name;
  while (std::getline(list, name, ',')) {
    const PrecisionPolicy policy = PrecisionPolicy::for_compute(parse_dtype(name, "--dtypes"));
    const Run r = run(config, policy);
    std::cout << "| " << policy.str() << " | " << format_fixed(spearman(r.scores, golden.scores), 4) << " | "
              << format_fixed(pearson(r.scores, golden.scores), 4) << " | "
              << format_fixed(lowest_k_overlap(r.scores, golden.scores, 10), 1) << " | "
              << format_fixed(highest_k_overlap(r.scores, golden.scores, 10), 1) << " | "
              << format_fixed(r.query_loss, 4) << " | " << format_fixed(r.seconds, 1) << " |\n";
  }
  return 0;
}
