#include "checks/lm_pipelines.h"

#include "lib/core/dtype.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/dist/data_parallel.h"
#include "lib/train/magic_pipeline.h"
#include "reference/unrolled_lm.h"

namespace magic::checks {

RunConfig lm_check_config(const CheckSettings& s) {
  nlohmann::json optimizer = {{"name", s.optimizer}, {"lr", s.optimizer == "sgd" ? 0.3 : 0.01}};
  if (s.optimizer == "sgd") {
    optimizer["momentum"] = 0.9;
  } else {
    optimizer["eps_root"] = 1e-10;
    optimizer["weight_decay"] = 0.01;
  }
  optimizer["clip_norm"] = 5.0;
  optimizer["schedule"] = {{"name", "cosine"}, {"warmup_steps", s.steps > 1 ? 1 : 0}};
  nlohmann::json json = {
      {"seed", s.seed},
      {"dtype", dtype_name(s.dtype)},
      {"model", {{"vocab", 257}, {"d_model", 16}, {"n_layers", 1}, {"n_heads", 2}, {"max_len", s.max_len}}},
      {"data", {{"train", "text/proverbs.jsonl"}, {"queries", "text/queries.jsonl"}, {"max_documents", s.documents}}},
      {"training",
       {{"steps", s.steps},
        {"batch_size", s.global_batch()},
        {"weights", "per_token"},
        {"checkpoints", s.checkpoints}}},
      {"optimizer", optimizer},
  };
  return RunConfig::from_json(json, "magic-check workload", s.fixtures_dir);
}

TensorTree hvp_direction(const TensorTree& params, uint64_t seed) {
  at::Generator gen = make_generator(derive_seed(seed, "hvp-direction"));
  return params.map([&](const at::Tensor& p) {
    return at::randn(p.sizes(), gen, at::TensorOptions().dtype(at::kDouble)).to(p.scalar_type());
  });
}

PipelineOutputs run_distributed_lm(const CheckSettings& settings, const dist::Runtime& runtime, dist::PlantedBug bug) {
  const RunConfig config = lm_check_config(settings);
  auto parallel = std::make_shared<dist::DataParallel>(runtime.world(), settings.convention, bug);
  const LmProblem problem = build_lm_problem(config, parallel);
  PipelineOutputs out;

  MagicOptions options;
  options.schedule = config.checkpoints;
  options.on_step = [&](int64_t, const TrainState&, const StepOutput& o) { out.step_grads.push_back(o.grads); };
  MagicResult result = run_magic(*problem.step, *problem.query, problem.initial, problem.weights, options);
  out.scores = result.scores;
  out.final_params = result.final_state.params;
  out.query_grad = result.query_gradient;

  const TensorTree v = hvp_direction(problem.initial.params, settings.seed);
  const int64_t last = problem.step->num_steps() - 1;
  out.hvp_initial = hessian_vector_product(*problem.step, problem.initial.params, 0, problem.weights, v);
  out.hvp_final = hessian_vector_product(*problem.step, out.final_params, last, problem.weights, v);
  return out;
}

PipelineOutputs run_reference_lm(const CheckSettings& settings) {
  const RunConfig config = lm_check_config(settings);
  const LmProblem problem = build_lm_problem(config);  // data, init and order only
  reference::UnrolledLmSetup setup{problem.model,     problem.train,  &problem.query->queries(),
                                   *problem.stream,   config.reduction, problem.optimizer,
                                   config.optimizer.clip_norm, problem.initial.params};
  auto unrolled = reference::unrolled_lm_scores(setup, problem.weights);
  PipelineOutputs out;
  out.step_grads = unrolled.step_grads;
  out.final_params = unrolled.final_params;
  out.scores = unrolled.scores;
  out.query_grad = reference::lm_query_gradient(setup, unrolled.final_params);
  const TensorTree v = hvp_direction(problem.initial.params, settings.seed);
  out.hvp_initial = reference::lm_batch_hvp(setup, problem.initial.params, problem.weights, 0, v);
  out.hvp_final =
      reference::lm_batch_hvp(setup, unrolled.final_params, problem.weights, problem.stream->num_steps() - 1, v);
  return out;
}

std::vector<int64_t> shard_label_counts(const CheckSettings& settings, int64_t step) {
  const LmProblem problem = build_lm_problem(lm_check_config(settings));
  const std::vector<int64_t> rows = problem.stream->rows(step);
  const auto dp = static_cast<int>(settings.topology.dp());
  std::vector<int64_t> counts;
  for (int r = 0; r < dp; ++r) {
    auto [begin, end] = dist::shard_range(static_cast<int64_t>(rows.size()), r, dp);
    const Batch batch = make_batch(*problem.train, std::vector<int64_t>(rows.begin() + begin, rows.begin() + end));
    counts.push_back(label_mask(batch.labels, at::kDouble).sum().item<int64_t>());
  }
  return counts;
}

}  // namespace magic::checks
