#include "checks/run_check.h"

#include <chrono>

#include "checks/lm_pipelines.h"
#include "checks/mutations.h"
#include "lib/compare/comparison.h"
#include "lib/core/dtype.h"
#include "lib/core/strings.h"

namespace magic::checks {
namespace {

std::vector<CheckRow> compare_lm(const PipelineOutputs& d, const PipelineOutputs& r, const CheckSettings& s) {
  const double tol = default_tolerance(s.dtype);
  const auto factors = candidate_factors(s.topology.named_sizes());
  std::vector<CheckRow> rows;
  auto add = [&](const std::string& level, const std::string& tensor, const at::Tensor& a, const at::Tensor& b) {
    rows.push_back(make_check_row(level, tensor, a, b, tol, factors));
  };
  if (s.wants(Level::kGrad)) {
    for (const auto& p : r.step_grads.front()) {
      std::vector<at::Tensor> ds, rs;
      for (size_t t = 0; t < r.step_grads.size(); ++t) {
        ds.push_back(d.step_grads[t].at(p.name).reshape({-1}));
        rs.push_back(r.step_grads[t].at(p.name).reshape({-1}));
      }
      add("grad", p.name, at::cat(ds), at::cat(rs));
    }
  }
  if (s.wants(Level::kQueryGrad)) add("query_grad", "all", d.query_grad.flatten(), r.query_grad.flatten());
  if (s.wants(Level::kHvp)) {
    add("hvp", "theta_0", d.hvp_initial.flatten(), r.hvp_initial.flatten());
    add("hvp", "theta_N", d.hvp_final.flatten(), r.hvp_final.flatten());
  }
  if (s.wants(Level::kFinalParams)) add("final_params", "all", d.final_params.flatten(), r.final_params.flatten());
  if (s.wants(Level::kScores)) {
    add("scores", "per_document", d.scores.sum(1), r.scores.sum(1));
    add("scores", "per_token", d.scores, r.scores);
  }
  return rows;
}

}  // namespace

CheckReport run_check(const CheckRequest& request, const dist::Runtime& runtime) {
  const auto start = std::chrono::steady_clock::now();
  const CheckSettings& s = request.settings;
  std::vector<Mutation> mutations;
  if (request.mode == CheckMode::kMutate) mutations.push_back(find_mutation(request.mutation, s.topology));
  if (request.mode == CheckMode::kBite) mutations = mutations_for(s.topology);

  // The distributed runs, on every rank: clean first (unless --mutate), then each mutation.
  std::vector<PipelineOutputs> runs;
  if (request.mode != CheckMode::kMutate) runs.push_back(run_distributed_lm(s, runtime, dist::PlantedBug::kNone));
  for (const auto& m : mutations) runs.push_back(run_distributed_lm(s, runtime, m.bug));

  CheckReport report;
  report.topology = s.topology.str();
  report.world_size = runtime.world_size();
  report.workload = s.workload;
  report.dtype = dtype_name(s.dtype);
  report.convention = dist::convention_name(s.convention);
  report.backend = dist::backend_name(s.backend);
  report.steps = s.steps;
  report.seed = s.seed;
  report.bite_mode = request.mode == CheckMode::kBite;
  if (runtime.rank() != 0) return report;

  const PipelineOutputs reference = run_reference_lm(s);
  report.rows = compare_lm(runs.front(), reference, s);
  if (s.convention == dist::Convention::kAvg && !report.rows_pass()) {
    const auto counts = shard_label_counts(s, 0);
    std::vector<std::string> shown;
    for (int64_t c : counts) shown.push_back(std::to_string(c));
    if (std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) != counts.end()) {
      report.notes.push_back(str_cat("--convention avg (local mean, AVG reduction) is exact only when every shard "
                                     "holds the same number of valid labels; at step 0 the ", counts.size(),
                                     " shards hold ", join(shown, ", "), " labels. Each shard's mean gets weight 1/dp "
                                     "instead of its share of the global count. Use --convention sum."));
    }
  }
  if (request.mode == CheckMode::kMutate) {
    report.mutation = mutations.front().name;
    report.bite.push_back(judge_mutation(mutations.front(), report.rows));
  }
  for (size_t i = 0; request.mode == CheckMode::kBite && i < mutations.size(); ++i) {
    report.bite.push_back(judge_mutation(mutations[i], compare_lm(runs[i + 1], reference, s)));
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace magic::checks
