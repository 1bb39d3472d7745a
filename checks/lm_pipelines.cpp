#include "checks/lm_pipelines.h"

#include <numeric>

#include "checks/first_divergence.h"
#include "checks/hessian_vector_product.h"
#include "checks/phase_progress.h"
#include "checks/planted_bridge.h"
#include "checks/planted_micro_batches.h"
#include "checks/planted_pipeline.h"
#include "checks/planted_precision.h"
#include "checks/planted_variants.h"
#include "checks/reduction_probe.h"
#include "checks/replay_products.h"
#include "checks/replay_start.h"
#include "checks/replay_states.h"
#include "checks/shard_weights.h"

#include "lib/core/dtype.h"
#include "lib/core/run_device.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/parallel/mesh_layout.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/train/bridged_lm.h"
#include "lib/train/distributed_lm.h"
#include "lib/train/magic_pipeline.h"
#include "reference/unrolled_lm.h"

namespace magic::checks {

namespace {

nlohmann::json workload_json(const CheckSettings& s, const nlohmann::json& optimizer) {
  // The built-in model has lcm(2, tp) heads (2 up to tp = 2), 4 dimensions or more each, so that
  // every tp splits it; its vocabulary of 257 bytes is one no tp > 1 divides (padding always runs);
  // a layer for each pipeline chunk (one without pp).
  const int64_t heads = std::lcm<int64_t>(2, s.topology.tp());
  // On a bridge layout, a multimodal workload: 8 patches of 8 features before each row's text
  // (fixtures/multimodal), through an encoder whose hidden width every encoder tp divides.
  const bool multimodal = s.topology.is_bridge();
  const int64_t patches = 8;
  // Ring attention cuts the sequence into 2·cp equal chunks: the built-in sequence is rounded up.
  const int64_t chunks = s.topology.ring() ? 2 * s.topology.cp() : 1;
  const int64_t max_len = (s.max_len + chunks - 1) / chunks * chunks;
  const nlohmann::json model =
      s.model_folder.empty()
          ? nlohmann::json{{"vocab", 257},
                           {"d_model", std::max<int64_t>(16, 4 * heads)},
                           {"n_layers", s.topology.pp() * s.topology.vpp()},
                           {"n_heads", heads},
                           {"max_len", max_len + (multimodal ? patches : 0)}}
          : nlohmann::json{{"path", s.model_folder}, {"max_len", max_len + (multimodal ? patches : 0)}};
  nlohmann::json data = {
      {"train", "text/proverbs.jsonl"}, {"queries", "text/queries.jsonl"}, {"max_documents", s.documents}};
  nlohmann::json out = {
      {"seed", s.seed},
      {"dtype", s.precision.to_json()},
      {"model", model},
      {"data", data},
      {"training",
       {{"steps", s.steps},
        {"batch_size", s.global_batch()},
        {"weights", "per_token"},
        {"label_smoothing", s.label_smoothing},
        {"checkpoints", s.checkpoints}}},
      {"optimizer", optimizer},
  };
  if (multimodal) {
    out["data"]["patches"] = "multimodal/patches.safetensors";
    out["encoder"] = {
        {"patches", patches}, {"features", 8}, {"hidden", std::lcm<int64_t>(32, s.topology.bridge().encoder.tp)}};
  }
  return out;
}

}  // namespace

double workload_clip_norm(const CheckSettings& s) {
  CheckSettings fp64 = s;
  fp64.precision = PrecisionPolicy{};
  const LmProblem p = build_lm_problem(
      RunConfig::from_json(workload_json(fp64, s.optimizer_json()), "magic-check workload", s.fixtures_dir));
  std::vector<double> norms;
  const TrainState at_start{p.initial.params.requires_grad(), p.initial.opt, {}};
  PhaseProgress progress("clip norm: gradients at θ_0", p.step->num_steps());
  for (int64_t t = 0; t < p.step->num_steps(); ++t) {
    norms.push_back(norm(p.step->gradient(at_start, t, p.weights, false)).item<double>());
    progress.update(t + 1);
  }
  progress.finish();
  return clip_norm_between(norms);
}

double clip_norm_between(std::vector<double> norms) {
  std::sort(norms.begin(), norms.end());
  if (norms.size() == 1) return norms.front() / 2;
  size_t gap = 0;  // the widest gap between neighbouring norms, by ratio
  for (size_t i = 1; i + 1 < norms.size(); ++i) {
    if (norms[i + 1] / norms[i] > norms[gap + 1] / norms[gap]) gap = i;
  }
  return std::sqrt(norms[gap] * norms[gap + 1]);
}

RunConfig lm_unclipped_config(const CheckSettings& s) {
  if (s.run_config) {
    RunConfig c = *s.run_config;
    c.steps = s.steps;
    // The settings' policy, not the config's: the golden reference of a bf16 config runs it in fp64.
    c.precision = s.precision;
    c.batch_size = s.global_batch();
    c.spill_dir.reset();  // the check keeps its few checkpoints in memory
    // The settings' schedule: a budget's checked steps run with sqrt's (check_settings.cpp).
    c.checkpoints = parse_checkpoint_schedule(s.checkpoints);
    // The host's: the reference computes there, and --device (not the config) places the run.
    c.device = DeviceKind::kCpu;
    return c;
  }
  return RunConfig::from_json(workload_json(s, s.optimizer_json()), "magic-check workload", s.fixtures_dir);
}

RunConfig lm_check_config(const CheckSettings& s) {
  RunConfig config;
  if (s.run_config) {
    config = lm_unclipped_config(s);  // the config's own clip norm, if any
  } else {
    nlohmann::json optimizer = s.optimizer_json();
    optimizer["clip_norm"] = workload_clip_norm(s);
    config = RunConfig::from_json(workload_json(s, optimizer), "magic-check workload", s.fixtures_dir);
  }
  validate_tensor_parallel(config.model, s.topology.tp(), str_cat("--topology ", s.topology.str()));
  return config;
}

TensorTree hvp_direction(const TensorTree& params, uint64_t seed) {
  at::Generator gen = make_generator(derive_seed(seed, "hvp-direction"));
  return params.map([&](const at::Tensor& p) {
    return at::randn(p.sizes(), gen, at::TensorOptions().dtype(at::kDouble)).to(p.scalar_type());
  });
}

namespace {

// n of each row's sums (pipeline_outputs.h): a gradient entry sums over the batch's label
// positions, the query gradient over the queries', a score is an inner product over the parameters.
struct SumLengths {
  int64_t batch_labels, query_labels, parameters;
};

SumLengths sum_lengths(const RunConfig& c, const LmProblem& problem, const TensorTree& full_params) {
  const int64_t labels_per_row = c.model.max_len - 1;
  return {c.batch_size * labels_per_row, problem.query->queries().size() * labels_per_row, full_params.numel()};
}

PipelineOutputs lm_grad_outputs(const SumLengths& n, const std::vector<TensorTree>& step_grads) {
  PipelineOutputs out;
  for (const auto& p : step_grads.front()) {
    std::vector<at::Tensor> steps;
    for (const auto& g : step_grads) steps.push_back(g.at(p.name).reshape({-1}));
    out.push_back({"grad", p.name, at::cat(steps), 0.0, /*shared_inputs=*/true, n.batch_labels});
    out.back().step_shape = p.tensor.sizes().vec();
  }
  return out;
}

// The training loss's value at every step's state (grad/loss): a sum over the batch's labels.
NamedTensor loss_output(const SumLengths& n, const at::Tensor& losses) {
  NamedTensor out{"grad", "loss", losses.reshape({-1})};
  out.shared_inputs = true;
  out.sum_length = n.batch_labels;
  out.not_a_gradient = true;
  return out;
}

// One optimizer step from the reference's state at every step t: what it consumed, its clip
// coefficient (undefined without clipping) and its update θ_{t+1} − θ_t; full-shape trees.
struct OptimizerSteps {
  std::vector<at::Tensor> coefficients;
  std::vector<TensorTree> inputs, updates;
};

void append_optimizer_outputs(PipelineOutputs& out, const SumLengths& n, const OptimizerSteps& steps) {
  // c_t = min(1, max/||g||): |δc|/c <= ||δg||/||g||, each entry of g a sum of the batch's label
  // positions in the compute dtype, ||g||² one sum of every parameter's squares in the master dtype.
  if (!steps.coefficients.empty()) {
    out.push_back({"optimizer", "clip_coefficient", at::stack(steps.coefficients).reshape({-1}), 0.0,
                   /*shared_inputs=*/true, n.batch_labels});
    out.back().master_sum_length = n.parameters;
  }
  for (const auto& p : steps.inputs.front()) {
    out.push_back({"optimizer", p.name + "[input]", steps_of(steps.inputs, p.name), 0.0, true, n.batch_labels});
  }
  // Not at shared inputs as far as rounding goes: Adam's update divides by sqrt(v), so an entry whose
  // gradient is rounding noise moves by up to ±lr in either run. Below fp32 shown only (a correct
  // bf16 run, dp=4,fsdp=4 adam seed 65364, was 0.68 off fp64 where the policy's own was 0.08: one
  // noise entry's sign); in fp32 judged under SGD only (pipeline_outputs.h, through_adam_eps).
  for (const auto& p : steps.updates.front()) {
    out.push_back({"optimizer", p.name + "[update]", steps_of(steps.updates, p.name), 0.0, false, n.batch_labels});
    out.back().judged_below_fp32 = false;
    out.back().through_adam_eps = true;
  }
}

// The levels after grad, appended to `out`; no score rows when `scores` is undefined (REPLAY
// not run: the scores level not wanted).
void append_trained_outputs(PipelineOutputs& out, const SumLengths& n, const TensorTree& query_grad,
                            const TensorTree& hvp_initial, const TensorTree& hvp_final,
                            const std::optional<NamedTensor>& replay_states, const PipelineOutputs& replay_start,
                            const ReplayProducts* replay_products, const TensorTree& final_params,
                            const at::Tensor& scores) {
  // Per parameter: a factor on one group of ∂Q/∂θ is that row's scale, not a few percent of one row.
  for (const auto& p : query_grad) {
    out.push_back({"query_grad", p.name, p.tensor.reshape({-1}), 0.0, false, n.query_labels});
    out.back().at_final_params = true;
  }
  out.push_back({"hvp", "theta_0", hvp_initial.flatten(), 0.0, /*shared_inputs=*/true, n.batch_labels});
  out.push_back({"hvp", "theta_N", hvp_final.flatten(), 0.0, false, n.batch_labels});
  out.back().at_final_params = true;
  if (replay_states) out.push_back(*replay_states);
  out.insert(out.end(), replay_start.begin(), replay_start.end());
  if (replay_products != nullptr) append_replay_product_outputs(out, n.batch_labels, *replay_products);
  // Per parameter: a precision bug in the update shows on the tensors it touches, not behind the
  // drift of the embeddings in one concatenation.
  for (const auto& p : final_params) {
    out.push_back({"final_params", p.name, p.tensor.reshape({-1}), 0.0, false, n.batch_labels, /*stored=*/true});
  }
  if (!scores.defined()) return;
  if (scores.dim() == 1) {  // per-document weights (a magic-run config)
    out.push_back({"scores", "per_document", scores, 0.0, false, n.parameters});
    return;
  }
  // A document's score sums its tokens' scores; they can cancel (to ~0 under clipping), so its
  // error is measured against the size of those terms: max over documents of Σ_t |score_t|.
  out.push_back(
      {"scores", "per_document", scores.sum(1), scores.abs().sum(1).max().item<double>(), false, n.parameters});
  out.push_back({"scores", "per_token", scores, 0.0, false, n.parameters});
}

// REPLAY's records as the distributed REPLAY makes them (lib/train/replay_backward.cpp), in its
// order: ∂Q/∂θ_N, then from the last step down λ_t = ∂Q/∂θ_t and the step's dQ/dw; the scores.
void record_replay(const TensorTree& query_gradient, const ReplayProducts& replay, const at::Tensor& scores) {
  trace_tree(query_gradient, {"", "gradient", "query", "first", -1, "", {}});
  for (int64_t t = static_cast<int64_t>(replay.params.size()) - 1; t >= 0; --t) {
    trace_tree(replay.params[t], {"", "cotangent", "replay", "metagradient", t, "", {}});
    trace_point(replay.dw[t], [&] { return TraceRecord{"scores", "score", "replay", "metagradient", t, "", {}}; });
  }
  trace_point(scores, [&] { return TraceRecord{"scores", "score", "replay", "metagradient", -1, "", {}}; });
}

}  // namespace

PipelineOutputs run_distributed_lm(const CheckSettings& settings, const dist::Runtime& runtime,
                                   const std::string& mutation, const ReferenceRun& reference,
                                   const std::string& trace_folder, TraceSink* live) {
  // The run computes on the check's device; the reference's states it starts from are the host's.
  RunConfig config = lm_check_config(settings);
  config.device = settings.device;
  const at::Device device = current_device(settings.device);
  const auto placed = [&](const TensorTree& tree) { return to_device(tree, device); };
  std::vector<TrainState> teacher;
  for (const TrainState& s : reference.states)
    teacher.push_back({placed(s.params), placed(s.opt), placed(s.persistent)});
  const dist::MeshParts parts = lm_mesh_parts(runtime, settings.topology, config.model);
  const bool bridge_mutation = is_bridge_mutation(mutation);
  std::shared_ptr<const Parallelism> parallel =
      planted_data_parallel(bridge_mutation ? "" : mutation, parts, settings.convention);
  // On a bridge layout the language model's mesh is one side of the step's Parallelism, and a
  // bridge mutation is planted in the bridge.
  std::shared_ptr<const PrefixEncoder> prefix;
  if (settings.topology.is_bridge()) {
    const BridgedLmParts bridged = bridged_lm_parts(runtime, settings.topology, config.model, *config.encoder);
    std::shared_ptr<const dist::Bridge> bridge =
        checks::planted_bridge(bridge_mutation ? mutation : "", runtime, bridged.layout, bridged.groups);
    // A mutation of the clip's joint norm is planted on both sides.
    const std::shared_ptr<const Parallelism> encoder_side =
        planted_on_both_bridge_sides(mutation) ? planted_data_parallel(mutation, bridged.encoder, settings.convention)
                                               : nullptr;
    const BridgedLm lm = bridged_lm(runtime, bridged, *config.encoder, encoder_side, parallel, bridge);
    parallel = lm.parallelism;
    prefix = lm.prefix;
  }
  // Shapes and order of the parameters (the GPT's, then a multimodal run's encoder's), as the
  // reference's tree has them.
  const TensorTree gpt = gpt_init(config.model, config.precision.master, config.seed);
  const TensorTree full_init =
      config.encoder ? merge(gpt, patch_encoder_init(*config.encoder, config.precision.master, config.seed)) : gpt;
  // The grad level also records each rank's local gradient where it enters the reduction.
  auto tap = std::make_shared<ReductionTap>();
  // And the normalizer each rank's loss is divided by (grad/shard_weights).
  auto normalizer = std::make_shared<NormalizerTap>();
  const LmProblem problem = build_lm_problem(config, normalizer_tapped(tapped_parallelism(parallel, tap), normalizer),
                                             planted_precision(mutation, config.precision, runtime.world_size()),
                                             planted_micro_batches(mutation, settings.topology.mb()), prefix);
  const auto step = planted_step(mutation, *problem.step, problem.optimizer);
  const auto query = planted_query(mutation, *problem.query, settings.topology.dp());
  const bool probe = has_reduction_rows(settings);
  // From here on (the workload's clip norm, computed above, is no record of this run): the live
  // tracer, and beside it the first divergence's recorder.
  std::optional<ScopedTraceSink> listening;
  if (live != nullptr) listening.emplace(live);
  std::optional<TraceRecorder> recorder;
  if (!trace_folder.empty()) recorder.emplace();
  // c of the reduction probe: the gradient the step returns is Σ_r partial_r / S (/ dp·cp under AVG).
  const double c =
      1.0 / config.precision.loss_scale /
      (settings.convention == dist::Convention::kAvg ? settings.topology.dp() * settings.topology.cp() : 1);
  // Sharded tensors (parameters and everything shaped like them) are compared at full shape.
  std::vector<TensorTree> step_grads;
  std::vector<at::Tensor> step_losses;
  const double loss_convention = convention_factor(*parallel, parallel->shard(full_init));
  std::vector<std::optional<NormalizerTap::Call>> normalizers;
  std::vector<std::map<std::string, ReductionTerms>> step_sums;
  OptimizerSteps optimizer_steps;
  ReplayProducts replay_products;
  for (size_t t = 0; t < teacher.size(); ++t) {
    const auto at_step = static_cast<int64_t>(t);
    dist::set_phase(str_cat("step gradients at step ", t));
    const TrainState at_reference{parallel->shard(teacher[t].params).requires_grad(), problem.initial.opt, {}};
    if (probe) tap->arm();
    normalizer->arm();
    const TensorTree local_grad = step->gradient(at_reference, at_step, problem.weights, false).detach();
    // The loss's value, every rank's share summed (the SUM convention's partial sums; AVG's local
    // means, averaged): a bug that leaves every gradient exact and the loss wrong shows here.
    step_losses.push_back(
        parallel->sum_across_ranks(problem.step->loss(at_reference.params, at_step, problem.weights).detach()) *
        loss_convention);
    normalizers.push_back(normalizer->take());
    step_grads.push_back(parallel->unshard(local_grad));
    if (probe) step_sums.push_back(exact_reductions(*parallel, tap->take(), c, settings.topology.mb()));
    if (settings.wants(Level::kReplay)) {
      // REPLAY's product of this step (the function REPLAY calls) at the teacher's state and cotangent.
      dist::set_phase(str_cat("REPLAY product at step ", t));
      const TrainState state{parallel->shard(teacher[t].params), shard_optimizer_state(*parallel, teacher[t].opt), {}};
      const TrainState& lambda = reference.cotangents.at(t);
      const TrainState cotangent{
          parallel->shard(placed(lambda.params)), shard_optimizer_state(*parallel, placed(lambda.opt)), {}};
      add_replay_products(replay_products, *step, *parallel, state, at_step, problem.weights, cotangent,
                          parallel->shard(placed(reference.gradient_cotangents.at(t))),
                          parallel->shard(placed(reference.gradients.at(t))));
    }
    if (!settings.wants(Level::kOptimizer)) continue;
    // One whole step from the reference's parameters and optimizer state.
    dist::set_phase(str_cat("optimizer step at step ", t));
    const TrainState sharded{parallel->shard(teacher[t].params), shard_optimizer_state(*parallel, teacher[t].opt), {}};
    const StepOutput one = step->step(sharded, at_step, problem.weights, false);
    if (one.clip_coefficient.defined()) optimizer_steps.coefficients.push_back(one.clip_coefficient);
    optimizer_steps.inputs.push_back(parallel->unshard(one.grads));
    optimizer_steps.updates.push_back(add(parallel->unshard(one.next.params), scale(teacher[t].params, -1.0)));
  }
  const SumLengths n = sum_lengths(config, problem, full_init);
  PipelineOutputs out = lm_grad_outputs(n, step_grads);
  out.push_back(loss_output(n, at::stack(step_losses).to(at::kDouble)));
  out.push_back(shard_weight_output(*parts.groups.world, normalizers,
                                    convention_factor(*parallel, parallel->shard(full_init)),
                                    settings.topology.tp() * settings.topology.pp()));
  if (settings.wants(Level::kOptimizer)) append_optimizer_outputs(out, n, optimizer_steps);
  // Levels past the optimizer need the training run (and REPLAY for replay and scores); a --bite
  // mutation run whose expected level is earlier skips them (CheckSettings::levels_through).
  if (settings.needs_training()) {
    MagicOptions options;
    options.schedule = config.checkpoints;
    options.replay = settings.needs_replay();
    ReplayStateWatch watch;  // replay/states
    watch.attach(options);
    const ReplayStartWatch start(*step);  // replay/<param>[start]
    MagicResult result = run_magic(start, *query, problem.initial, problem.weights, options);
    const TensorTree v = parallel->shard(placed(hvp_direction(full_init, settings.seed)));
    const int64_t last = problem.step->num_steps() - 1;
    std::optional<NamedTensor> states;
    PipelineOutputs start_rows;
    if (settings.needs_replay()) {
      states = replay_state_output(*parts.groups.world, watch.difference());
      start_rows = replay_start_outputs(*parts.groups.world, parallel->unshard(start.recorded()), n.query_labels);
    }
    const TensorTree hvp_initial = hessian_vector_product(*step, problem.initial, 0, problem.weights, v);
    const TensorTree hvp_final = hessian_vector_product(*step, result.final_state, last, problem.weights, v);
    record_hvp(hvp_initial, 0, step->trace_layout());
    record_hvp(hvp_final, last, step->trace_layout());
    append_trained_outputs(out, n, parallel->unshard(result.query_gradient), parallel->unshard(hvp_initial),
                           parallel->unshard(hvp_final), states, start_rows,
                           settings.wants(Level::kReplay) ? &replay_products : nullptr,
                           parallel->unshard(result.final_state.params), result.scores);
  }
  if (probe) append_reduction_outputs(out, step_grads, step_sums);
  if (recorder) write_rank_trace(trace_folder, recorder->sink(), *parts.groups.world, step->trace_layout());
  return out;
}

ReferenceRun run_reference_lm(const CheckSettings& settings) {
  const RunConfig config = lm_check_config(settings);
  const LmProblem problem = build_lm_problem(config);  // data, init and order only
  reference::UnrolledLmSetup setup{problem.model,
                                   problem.train,
                                   &problem.query->queries(),
                                   *problem.stream,
                                   config.reduction,
                                   problem.optimizer,
                                   config.optimizer.clip_norm,
                                   problem.initial.params,
                                   config.precision,
                                   {},
                                   config.label_smoothing,
                                   {},
                                   config.encoder};
  const std::string label = str_cat("reference (", config.precision.str(), ")");
  // The reference's records (first_divergence.h), from here on: config and clip norm are made.
  std::optional<TraceRecorder> recorder;
  if (settings.record_reference && first_divergence_unavailable(settings).empty()) recorder.emplace();
  // A run that accumulates records each micro-batch's rows apart: the reference records its own so.
  if (recorder && settings.topology.mb() > 1) {
    for (int64_t t = 0; t < problem.stream->num_steps(); ++t) {
      const auto rows = static_cast<int64_t>(problem.stream->rows(t).size());
      setup.trace_micro_batches.push_back(micro_batch_positions(rows, settings.topology.dp(), settings.topology.mb()));
    }
  }
  PhaseProgress training(label + ": training", problem.stream->num_steps());
  setup.after_step = [&training](int64_t t) { training.update(t + 1); };
  auto unrolled = reference::unrolled_lm_scores(setup, problem.weights);
  training.finish();
  setup.after_step = nullptr;
  PhaseProgress products(label + ": step products", problem.stream->num_steps());
  const TensorTree v = hvp_direction(problem.initial.params, settings.seed);
  const int64_t last = problem.stream->num_steps() - 1;
  const SumLengths n = sum_lengths(config, problem, problem.initial.params);
  ReferenceRun run;
  run.outputs = lm_grad_outputs(n, unrolled.step_grads);
  run.outputs.push_back(loss_output(n, at::tensor(unrolled.step_losses, at::kDouble)));
  run.outputs.push_back(
      shard_weight_reference(static_cast<int64_t>(unrolled.step_grads.size()), settings.topology.world_size()));
  OptimizerSteps steps{unrolled.step_clip_coefficients, unrolled.step_clipped, {}};
  for (size_t t = 0; t < unrolled.step_params.size(); ++t) {
    const TensorTree& next = t + 1 < unrolled.step_params.size() ? unrolled.step_params[t + 1] : unrolled.final_params;
    steps.updates.push_back(add(next, scale(unrolled.step_params[t], -1.0)));
  }
  append_optimizer_outputs(run.outputs, n, steps);
  ReplayProducts replay;
  for (size_t t = 0; t < unrolled.step_params.size(); ++t) {
    const reference::LmStepVjp vjp = reference::lm_step_vjp(
        setup, unrolled.step_params[t], unrolled.step_opt[t], problem.weights, static_cast<int64_t>(t),
        unrolled.step_param_cotangents[t], unrolled.step_opt_cotangents[t]);
    replay.through_gradient.push_back(vjp.through_gradient);
    replay.dw.push_back(vjp.dw);
    replay.params.push_back(vjp.params);
    replay.opt.push_back(vjp.opt);
    if (!vjp.clip_gradient.empty()) replay.clip_gradient.push_back(vjp.clip_gradient);
    run.gradient_cotangents.push_back(vjp.gradient_cotangent);
    run.gradients.push_back(unrolled.step_grads[t]);
    products.update(static_cast<int64_t>(t) + 1);
  }
  products.finish();
  const TensorTree query_gradient = reference::lm_query_gradient(setup, unrolled.final_params);
  const TensorTree hvp_initial = reference::lm_batch_hvp(setup, problem.initial.params, problem.weights, 0, v);
  const TensorTree hvp_final = reference::lm_batch_hvp(setup, unrolled.final_params, problem.weights, last, v);
  if (recorder) {
    record_replay(query_gradient, replay, unrolled.scores);
    record_hvp(hvp_initial, 0, TraceLayout{});
    record_hvp(hvp_final, last, TraceLayout{});
  }
  append_trained_outputs(
      run.outputs, n, query_gradient, hvp_initial, hvp_final, replay_state_reference(settings.topology.world_size()),
      replay_start_reference(unrolled.step_param_cotangents.back(), settings.topology.world_size(), n.query_labels),
      &replay, unrolled.final_params, unrolled.scores);
  for (size_t t = 0; t < unrolled.step_params.size(); ++t) {
    run.states.push_back(TrainState{unrolled.step_params[t], unrolled.step_opt[t], {}});
    run.cotangents.push_back(TrainState{unrolled.step_param_cotangents[t], unrolled.step_opt_cotangents[t], {}});
  }
  if (recorder) run.trace = recorder->sink().entries();
  return run;
}

int64_t lm_training_examples(const CheckSettings& settings) {
  CheckSettings one_row = settings;
  one_row.batch_size = 1;  // any batch and length the data can fill: only the dataset is wanted
  one_row.steps = 1;
  return build_lm_problem(lm_unclipped_config(one_row)).train->size();
}

std::vector<int64_t> shard_label_counts(const CheckSettings& settings, int64_t step) {
  const LmProblem problem = build_lm_problem(lm_check_config(settings));
  const std::vector<int64_t> rows = problem.stream->rows(step);
  const dist::MeshLayout mesh(settings.topology);
  std::vector<int64_t> counts;
  for (int rank = 0; rank < mesh.world_size(); ++rank) {
    auto [begin, end] = dist::shard_range(static_cast<int64_t>(rows.size()), static_cast<int>(mesh.dp_index(rank)),
                                          static_cast<int>(mesh.dp()));
    const Batch batch = make_batch(*problem.train, std::vector<int64_t>(rows.begin() + begin, rows.begin() + end));
    const int64_t length = batch.labels.size(1), padded = dist::cp_padded_length(length, mesh.cp());
    at::Tensor columns =
        mesh.cp() == 1 ? at::arange(length, at::kLong) : dist::zigzag_columns(padded, mesh.cp(), mesh.cp_index(rank));
    at::Tensor targets = next_token_targets(batch.labels, mesh.cp() == 1 ? length : padded).index_select(1, columns);
    counts.push_back(targets.ne(kIgnoreLabel).sum().item<int64_t>());
  }
  return counts;
}

}  // namespace magic::checks
