#include "checks/spd_pipelines.h"

#include "checks/first_divergence.h"
#include "checks/hessian_vector_product.h"
#include "checks/phase_progress.h"
#include "checks/planted_pipeline.h"
#include "checks/planted_precision.h"
#include "checks/planted_variants.h"

#include <torch/csrc/autograd/autograd.h>
#include "checks/lm_pipelines.h"
#include "checks/replay_start.h"
#include "checks/replay_states.h"

#include "lib/core/json_fields.h"
#include "lib/core/seed.h"
#include "lib/core/stop_signal.h"
#include "lib/core/strings.h"
#include "lib/distributed/pools/three_pool_spd.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/train/magic_pipeline.h"
#include "reference/unrolled_spd.h"

namespace magic::checks {
namespace {

bool is_ci(const std::string& name) {
  return name.rfind("ci.", 0) == 0;
}
bool is_vu(const std::string& name) {
  return name.rfind("V.", 0) == 0 || name.rfind("U.", 0) == 0;
}

at::Tensor group_of(const TensorTree& full, bool (*member)(const std::string&)) {
  return full.filter([&](const std::string& n, const at::Tensor&) { return member(n); }).flatten();
}

// Full trees from each pool leader's share (the other replicas contribute nothing): every
// (share, shape) pair in one world sum, since on a world of ten ranks a sum costs more in latency
// than in bytes.
struct Assembly {
  std::vector<TensorTree> shares, shapes;
  void add(const TensorTree& share, const TensorTree& shape) {
    shares.push_back(share);
    shapes.push_back(shape);
  }
  std::vector<TensorTree> full_trees(bool leader, const dist::Group& world) const {
    std::vector<at::Tensor> flat;
    for (size_t i = 0; i < shares.size(); ++i) {
      TensorTree full = shapes[i].zeros_like();
      if (leader) {
        for (const auto& e : shares[i]) {
          if (full.contains(e.name)) full.set(e.name, e.tensor.detach().to(full.at(e.name).scalar_type()));
        }
      }
      flat.push_back(full.flatten());
    }
    const at::Tensor summed = world.sum(at::cat(flat));
    std::vector<TensorTree> out;
    int64_t offset = 0;
    for (const auto& shape : shapes) {
      out.push_back(shape.unflatten(summed.narrow(0, offset, shape.numel())));
      offset += shape.numel();
    }
    return out;
  }
};

// Per-step gradients by row name ("theta_ci", "V/U[faithfulness]", ...), steps concatenated.
struct StepGradRows {
  std::map<std::string, std::vector<at::Tensor>> rows;
  void add(const std::string& term, const TensorTree& full) {
    const std::string suffix = term == "total" ? "" : "[" + term + "]";
    if (term != "faithfulness") rows["theta_ci" + suffix].push_back(group_of(full, is_ci));
    if (term != "importance") rows["V/U" + suffix].push_back(group_of(full, is_vu));
  }
};

// n of each row's sums (pipeline_outputs.h): a gradient entry sums over the batch's examples, the
// query gradient over the queries, a score is an inner product over the parameters.
struct SumLengths {
  int64_t batch, queries, parameters;
};

SumLengths sum_lengths(const CheckSettings& s, const SpdProblem& p) {
  return {s.global_batch(), p.data.queries.size(0), p.initial_params.numel()};
}

// One optimizer step from the reference's state at every step t (full trees): what it consumed,
// its clip coefficient and its update θ_{t+1} − θ_t.
struct OptimizerSteps {
  std::vector<at::Tensor> coefficients;
  std::vector<TensorTree> inputs, updates;
};

void append_optimizer_outputs(PipelineOutputs& out, const SumLengths& n, const OptimizerSteps& steps) {
  // c_t = min(1, max/||g||): its own sensitivity, each pool's gradient entry a sum over the batch,
  // ||g||² one sum of every pool's squares in the master dtype (pipeline_outputs.h).
  if (!steps.coefficients.empty()) {
    out.push_back({"optimizer", "clip_coefficient", at::stack(steps.coefficients).reshape({-1}), 0.0,
                   /*shared_inputs=*/true, n.batch});
    out.back().master_sum_length = n.parameters;
  }
  for (auto [group, member] : {std::pair{"theta_ci", is_ci}, std::pair{"V/U", is_vu}}) {
    std::vector<at::Tensor> inputs, updates;
    for (size_t t = 0; t < steps.inputs.size(); ++t) {
      inputs.push_back(group_of(steps.inputs[t], member));
      updates.push_back(group_of(steps.updates[t], member));
    }
    out.push_back({"optimizer", str_cat(group, "[input]"), at::cat(inputs), 0.0, true, n.batch});
    // Shown, not judged below fp32: Adam moves an entry whose gradient is rounding noise by ±lr
    // (the lm workload's [update] rows say more).
    out.push_back({"optimizer", str_cat(group, "[update]"), at::cat(updates), 0.0, false, n.batch});
    out.back().judged_below_fp32 = false;
    out.back().through_adam_eps = true;
  }
}

PipelineOutputs spd_grad_outputs(const SumLengths& n, const StepGradRows& grads) {
  PipelineOutputs out;
  for (const char* name : {"theta_ci", "theta_ci[reconstruction]", "theta_ci[importance]", "theta_ci[ppgd]", "V/U",
                           "V/U[faithfulness]", "V/U[reconstruction]", "V/U[ppgd]"}) {
    out.push_back({"grad", name, at::cat(grads.rows.at(name)), 0.0, /*shared_inputs=*/true, n.batch});
    out.back().step_shape = grads.rows.at(name).front().sizes().vec();
  }
  return out;
}

// The levels after grad, appended to `out`; no score row when `scores` is undefined (REPLAY not
// run: the scores level not wanted).
void append_trained_outputs(PipelineOutputs& out, const SumLengths& n, const TensorTree& query_grad,
                            const TensorTree& hvp_initial, const TensorTree& hvp_final,
                            const std::optional<NamedTensor>& replay_states, const PipelineOutputs& replay_products,
                            const TensorTree& final_params, const TensorTree& final_sources, const at::Tensor& scores) {
  out.push_back({"query_grad", "theta_ci", group_of(query_grad, is_ci), 0.0, false, n.queries});
  out.back().at_final_params = true;
  out.push_back({"query_grad", "V/U", group_of(query_grad, is_vu), 0.0, false, n.queries});
  out.back().at_final_params = true;
  out.push_back({"hvp", "theta_0", hvp_initial.flatten(), 0.0, /*shared_inputs=*/true, n.batch});
  out.push_back({"hvp", "theta_N", hvp_final.flatten(), 0.0, false, n.batch});
  out.back().at_final_params = true;
  if (replay_states) out.push_back(*replay_states);
  out.insert(out.end(), replay_products.begin(), replay_products.end());
  out.push_back({"final_params", "theta_ci", group_of(final_params, is_ci), 0.0, false, n.batch, /*stored=*/true});
  out.push_back({"final_params", "V/U", group_of(final_params, is_vu), 0.0, false, n.batch, /*stored=*/true});
  // The sources move by ±ppgd_step from 0.5 (values every dtype holds): not a master-weights check.
  out.push_back({"final_params", "sources", final_sources.flatten(), 0.0, false, n.batch});
  if (scores.defined()) out.push_back({"scores", "per_document", scores, 0.0, false, n.parameters});
}

SpdProblem unclipped_spd_problem(const CheckSettings& s) {
  SpdProblem p;
  const int64_t batch = s.global_batch();
  p.config.n_sites = s.spd_sites();
  p.config.examples = std::max<int64_t>(64, 2 * batch);
  p.data = spd_data(p.config, batch, s.precision.master, s.seed);
  p.stream = std::make_shared<DataStream>(p.config.examples,
                                          StreamConfig{batch, s.steps, derive_seed(s.seed, "data-order"), true},
                                          "the decomposition workload");
  const nlohmann::json optimizer = s.optimizer_json();
  p.optimizer = make_optimizer(OptimizerConfig::from_json(JsonFields(optimizer, "magic-check optimizer"), s.steps));
  p.initial_params = spd_init_params(p.config, s.precision.master, s.seed);
  p.initial_sources = spd_init_all_sources(p.config, s.precision.master);
  p.source_seed = derive_seed(s.seed, "spd-sources");
  return p;
}

reference::UnrolledSpdSetup reference_setup(const CheckSettings& s, const SpdProblem& p) {
  return {p.config,          p.data,        *p.stream,   p.optimizer, p.clip_norm, p.initial_params,
          p.initial_sources, p.source_seed, s.precision, {}};
}

at::Tensor unit_weights(const SpdProblem& p, const CheckSettings& s) {
  return at::ones({p.config.examples}, at::TensorOptions().dtype(s.precision.master));
}

// κ·∂c/∂θ of step t as REPLAY's backward takes it, each pool putting cotangent 1 on its use of c
// (the PPGD pool, which clips no parameter, 0): κ = 1 + n_blocks, each pool counted once.
TensorTree clip_vjp(const dist::ThreePoolSpd& spd, const TrainState& share, int64_t t, const at::Tensor& w) {
  const TrainState leaves{share.params.requires_grad(), share.opt, share.persistent.requires_grad()};
  const StepOutput out = spd.step(leaves, t, w, /*traced=*/true);
  at::Tensor objective = (spd.role() == dist::PoolRole::kPpgd ? 0.0 : 1.0) * out.clip_coefficient;
  // Each gradient with weight 0: every rank walks its whole graph, portals included, as in REPLAY.
  for (const auto& g : out.grads) objective = objective + 0.0 * g.tensor.sum();
  const auto d = torch::autograd::grad({objective}, leaves.params.tensors(), {}, false, false, /*allow_unused=*/true);
  return with_values(leaves.params, d, 0).detach();
}

// This rank's share of the HVP direction (a tree over every parameter): zeros for sync.
TensorTree direction_share(const TensorTree& v_full, const TensorTree& params) {
  return params.map_named([&](const std::string& name, const at::Tensor& x) {
    return v_full.contains(name) ? v_full.at(name) : at::zeros_like(x);
  });
}

// ∂(v·g_t)/∂w of step t (g_t unclipped, v the HVP direction, replicated) as REPLAY assembles it:
// every rank differentiates its share, the step's assemble_weight_gradient sums them. sync's
// direction is 0: every rank walks its whole graph, portals included, as in REPLAY.
at::Tensor weight_product(const dist::ThreePoolSpd& spd, const TrainState& share, const TensorTree& v_full, int64_t t,
                          const at::Tensor& w) {
  const TrainState leaves{share.params.requires_grad(), share.opt, share.persistent};
  const at::Tensor w_leaf = w.detach().clone().requires_grad_(true);
  const TensorTree g = spd.gradient(leaves, t, w_leaf, /*create_graph=*/true);
  // With respect to θ as well, as REPLAY: autograd walks only paths to its inputs, and a portal
  // whose backward one rank skips leaves its peer waiting.
  std::vector<at::Tensor> inputs = leaves.params.tensors();
  inputs.push_back(w_leaf);
  const auto d = torch::autograd::grad({dot(g, direction_share(v_full, g))}, inputs, {}, false, false,
                                       /*allow_unused=*/true);
  return spd.assemble_weight_gradient(d.back().defined() ? d.back().detach() : at::zeros_like(w));
}

// The replay level's rows: λ_N REPLAY started from, per group (replay_start.h: the pool leaders'
// copies, assembled as the query gradient; undefined without REPLAY); the products: the clip's
// derivative (with clipping) and δw through the gradient.
PipelineOutputs replay_product_rows(const SumLengths& n, const TensorTree& start, const at::Tensor& clip_vjp,
                                    const at::Tensor& dw) {
  PipelineOutputs out;
  if (!start.empty()) {
    for (auto [group, member] : {std::pair{"theta_ci", is_ci}, std::pair{"V/U", is_vu}}) {
      out.push_back({"replay", replay_start_row_name(group), group_of(start, member), 0.0, false, n.queries});
    }
  }
  if (clip_vjp.defined()) out.push_back({"replay", "clip_coefficient[vjp]", clip_vjp, 0.0, true, n.batch});
  if (dw.defined()) out.push_back({"replay", "w[vjp]", dw, 0.0, true, n.batch});
  return out;
}

at::Tensor steps_flat(const std::vector<TensorTree>& steps) {
  std::vector<at::Tensor> flat;
  for (const auto& s : steps) flat.push_back(s.flatten());
  return at::cat(flat);
}

// This rank's share of a full state (the reference's): its parameters, sources and optimizer slots
// (a slot "kind.param" goes with its parameter; 0-dim slots, the step count, with every rank).
TrainState share_of(const dist::ThreePoolSpd& spd, const TrainState& full) {
  TrainState share = spd.initial_state(full.params, full.persistent);
  share.opt = full.opt.filter([&](const std::string& name, const at::Tensor& slot) {
    const auto dot = name.find('.');
    return slot.dim() == 0 || (dot != std::string::npos && share.params.contains(name.substr(dot + 1)));
  });
  return share;
}

}  // namespace

SpdProblem spd_problem(const CheckSettings& s) {
  SpdProblem p = unclipped_spd_problem(s);
  CheckSettings fp64 = s;
  fp64.precision = PrecisionPolicy{};
  const SpdProblem plain = unclipped_spd_problem(fp64);
  const reference::UnrolledSpdSetup setup = reference_setup(fp64, plain);
  std::vector<double> norms;
  PhaseProgress progress("clip norm: gradients at θ_0", plain.stream->num_steps());
  for (int64_t t = 0; t < plain.stream->num_steps(); ++t) {
    norms.push_back(norm(reference::spd_batch_gradient(setup, plain.initial_params, plain.initial_sources,
                                                       unit_weights(plain, fp64), t))
                        .item<double>());
    progress.update(t + 1);
  }
  progress.finish();
  p.clip_norm = clip_norm_between(norms);
  return p;
}

// One side's records for the first divergence (first_divergence.h): the three-pool workload
// assembles its tensors before comparing them, so its records are whole and name no rank.
struct SpdRecords {
  std::vector<std::map<std::string, TensorTree>> step_grads;  // by term, "total" the whole gradient
  std::vector<at::Tensor> coefficients;
  std::vector<TensorTree> updates, clip_vjps;
  std::vector<at::Tensor> weight_products;
  TensorTree query_gradient, hvp_initial, hvp_final;  // the products at steps 0 and `last`
  int64_t last = 0;
  at::Tensor scores;

  // In the run's order: each step's term gradients, its gradient, clip and update; REPLAY's
  // products from the last step down; the query gradient and the scores.
  std::vector<DumpSink::Entry> entries() const {
    DumpSink out;
    const auto add = [&](const char* name, const char* kind, const char* phase, int64_t t, const at::Tensor& v) {
      out.write({name, kind, phase, phase == std::string("optimizer") ? "first" : "metagradient", t, "", {}}, v);
    };
    for (size_t i = 0; i < step_grads.size(); ++i) {
      const auto t = static_cast<int64_t>(i);
      const TraceRecord gradient{"", "gradient", "backward", "first", t, "", {}};
      for (const auto& [term, tree] : step_grads[i]) {
        if (term != "total") write_tree(out, tree, gradient, "[" + term + "]");
      }
      write_tree(out, step_grads[i].at("total"), gradient);
      if (i < coefficients.size()) add("clip_coefficient", "other", "optimizer", t, coefficients[i]);
      if (i < updates.size()) write_tree(out, updates[i], {"", "update", "optimizer", "first", t, "", {}});
    }
    for (int64_t t = static_cast<int64_t>(weight_products.size()) - 1; t >= 0; --t) {
      if (static_cast<size_t>(t) < clip_vjps.size()) {
        write_tree(out, clip_vjps[t], {"", "other", "replay", "metagradient", t, "", {}}, "[clip product]");
      }
      add("weight_product", "other", "replay", t, weight_products[t]);
    }
    write_tree(out, query_gradient, {"", "gradient", "query", "first", -1, "", {}});
    write_tree(out, hvp_initial, {"", "gradient", "backward", "hvp", 0, "", {}});
    write_tree(out, hvp_final, {"", "gradient", "backward", "hvp", last, "", {}});
    if (scores.defined()) add("scores", "score", "replay", -1, scores);
    return out.entries();
  }
};

PipelineOutputs run_distributed_spd(const CheckSettings& settings, const dist::Runtime& runtime,
                                    const std::string& mutation, const std::vector<TrainState>& teacher,
                                    std::vector<DumpSink::Entry>* records, TraceSink* live) {
  const SpdProblem p = spd_problem(settings);
  const dist::ThreePoolLayout layout(settings.topology, p.config.n_sites);
  layout.check_batch(settings.global_batch(), "--batch");
  const dist::ThreePoolGroups groups = dist::make_three_pool_groups(runtime, layout);
  const dist::ThreePoolSpd spd(
      {p.config, p.data, p.stream, p.optimizer, p.clip_norm, p.source_seed, planted_three_pool_conventions(mutation),
       planted_precision(mutation, settings.precision, runtime.world_size())},
      layout, groups, runtime.rank());
  const dist::Group& world = *runtime.world();
  const bool leader = spd.pool_leader();
  const TrainState initial = spd.initial_state(p.initial_params, p.initial_sources);
  const at::Tensor w = unit_weights(p, settings);

  const TensorTree v_full = hvp_direction(p.initial_params, settings.seed);
  Assembly step_grads, optimizer_steps, clip_vjps;
  std::vector<std::string> step_terms;
  std::vector<at::Tensor> coefficients, weight_products;
  for (size_t t = 0; t < teacher.size(); ++t) {
    dist::set_phase(str_cat("step gradients at step ", t));
    const auto step = static_cast<int64_t>(t);
    const TrainState share = share_of(spd, teacher[t]);
    const TrainState leaves{share.params.requires_grad(), share.opt, share.persistent};
    step_grads.add(spd.gradient(leaves, step, w, false), p.initial_params);
    step_terms.push_back("total");
    for (SpdTerm term : spd_terms()) {
      step_grads.add(spd.term_gradient(share, step, w, term), p.initial_params);
      step_terms.push_back(spd_term_name(term));
    }
    if (settings.wants(Level::kReplay)) {
      dist::set_phase(str_cat("REPLAY product at step ", t));
      if (p.clip_norm) clip_vjps.add(clip_vjp(spd, share, step, w), p.initial_params);
      weight_products.push_back(weight_product(spd, share, v_full, step, w));
    }
    if (!settings.wants(Level::kOptimizer)) continue;
    // One whole step from the reference's parameters, sources and optimizer state.
    dist::set_phase(str_cat("optimizer step at step ", t));
    const StepOutput one = spd.step(share, step, w, false);
    if (one.clip_coefficient.defined()) coefficients.push_back(one.clip_coefficient);
    optimizer_steps.add(one.grads, p.initial_params);
    optimizer_steps.add(one.next.params, p.initial_params);
  }
  StepGradRows grads;
  SpdRecords whole;
  const std::vector<TensorTree> full_grads = step_grads.full_trees(leader, world);
  for (size_t i = 0; i < full_grads.size(); ++i) {
    grads.add(step_terms[i], full_grads[i]);
    if (step_terms[i] == "total") whole.step_grads.emplace_back();
    whole.step_grads.back()[step_terms[i]] = full_grads[i];
  }
  const SumLengths n = sum_lengths(settings, p);
  PipelineOutputs out = spd_grad_outputs(n, grads);
  if (settings.wants(Level::kOptimizer)) {
    const std::vector<TensorTree> full = optimizer_steps.full_trees(leader, world);
    OptimizerSteps steps{coefficients, {}, {}};
    for (size_t t = 0; t < teacher.size(); ++t) {
      steps.inputs.push_back(full[2 * t]);
      steps.updates.push_back(add(full[2 * t + 1], scale(teacher[t].params, -1.0)));
    }
    append_optimizer_outputs(out, n, steps);
    whole.coefficients = coefficients;
    whole.updates = steps.updates;
  }
  at::Tensor clip_vjp_row, dw_row;
  if (!clip_vjps.shares.empty()) {
    whole.clip_vjps = clip_vjps.full_trees(leader, world);
    clip_vjp_row = steps_flat(whole.clip_vjps);
  }
  whole.weight_products = weight_products;
  if (!weight_products.empty()) dw_row = at::cat(weight_products);
  // Levels past grad need the training run (and REPLAY for the scores); a --bite mutation run
  // whose expected level is grad skips them (CheckSettings::levels_through).
  if (settings.needs_training()) {
    MagicOptions options;
    options.schedule = parse_checkpoint_schedule(settings.checkpoints);
    options.replay = settings.needs_replay();
    ReplayStateWatch watch;  // replay/states
    watch.attach(options);
    const auto step = planted_step(mutation, spd, p.optimizer);
    const ReplayStartWatch start(*step);  // replay/<group>[start]
    MagicResult result = run_magic(start, spd, initial, w, options);
    std::optional<NamedTensor> states;
    if (settings.needs_replay()) states = replay_state_output(world, watch.difference());

    // The HVP direction: one random tree over every parameter; each rank takes its share.
    const int64_t last = spd.num_steps() - 1;
    const TensorTree hvp0 = hessian_vector_product(spd, initial, 0, w, direction_share(v_full, initial.params));
    const TensorTree hvpN =
        hessian_vector_product(spd, result.final_state, last, w, direction_share(v_full, result.final_state.params));
    Assembly outputs;
    for (const TensorTree* tree :
         std::initializer_list<const TensorTree*>{&result.query_gradient, &hvp0, &hvpN, &result.final_state.params}) {
      outputs.add(*tree, p.initial_params);
    }
    outputs.add(result.final_state.persistent, p.initial_sources);
    if (settings.needs_replay()) outputs.add(start.recorded(), p.initial_params);
    const std::vector<TensorTree> full = outputs.full_trees(leader, world);
    const TensorTree full_start = settings.needs_replay() ? full[5] : TensorTree{};
    append_trained_outputs(out, n, full[0], full[1], full[2], states,
                           replay_product_rows(n, full_start, clip_vjp_row, dw_row), full[3], full[4], result.scores);
    whole.query_gradient = full[0];
    whole.hvp_initial = full[1];
    whole.hvp_final = full[2];
    whole.last = last;
    whole.scores = result.scores;
  }
  spd.finish();
  if ((records != nullptr || live != nullptr) && runtime.rank() == 0) {
    std::vector<DumpSink::Entry> entries = whole.entries();
    if (live != nullptr) {
      for (const DumpSink::Entry& e : entries) live->write(e.record, e.tensor);
    }
    if (records != nullptr) *records = std::move(entries);
  }
  return out;
}

ReferenceRun run_reference_spd(const CheckSettings& settings) {
  const SpdProblem p = spd_problem(settings);
  reference::UnrolledSpdSetup setup = reference_setup(settings, p);
  const at::Tensor w = unit_weights(p, settings);
  const std::string label = str_cat("reference (", settings.precision.str(), ")");
  PhaseProgress training(label + ": training", p.stream->num_steps());
  setup.after_step = [&training](int64_t t) { training.update(t + 1); };
  const auto unrolled = reference::unrolled_spd_scores(setup, w);
  training.finish();
  setup.after_step = nullptr;
  StepGradRows grads;
  SpdRecords whole;
  whole.step_grads = unrolled.step_grads;
  for (const auto& step : unrolled.step_grads) {
    for (const auto& [term, tree] : step) grads.add(term, tree);
  }
  const TensorTree v = hvp_direction(p.initial_params, settings.seed);
  const int64_t last = p.stream->num_steps() - 1;
  const SumLengths n = sum_lengths(settings, p);
  at::Tensor clip_vjp_row, dw_row;
  if (settings.wants(Level::kReplay)) {
    const double kappa =
        1.0 + static_cast<double>(dist::ThreePoolLayout(settings.topology, p.config.n_sites).n_blocks());
    std::vector<TensorTree> clip_steps;
    std::vector<at::Tensor> dw_steps;
    for (size_t t = 0; t < unrolled.step_params.size(); ++t) {
      const auto step = static_cast<int64_t>(t);
      const TensorTree& params = unrolled.step_params[t];
      const TensorTree& sources = unrolled.step_sources[t];
      if (p.clip_norm) clip_steps.push_back(reference::spd_clip_gradient(setup, params, sources, w, step, kappa));
      dw_steps.push_back(reference::spd_weight_product(setup, params, sources, w, step, v));
      throw_if_stop_requested(str_cat(label, ": step products, step ", t + 1, " of ", unrolled.step_params.size()));
    }
    if (!clip_steps.empty()) clip_vjp_row = steps_flat(clip_steps);
    dw_row = at::cat(dw_steps);
    whole.clip_vjps = clip_steps;
    whole.weight_products = dw_steps;
  }
  ReferenceRun run;
  run.outputs = spd_grad_outputs(n, grads);
  if (settings.wants(Level::kOptimizer)) {
    OptimizerSteps steps{unrolled.step_clip_coefficients, unrolled.step_clipped, {}};
    for (size_t t = 0; t < unrolled.step_params.size(); ++t) {
      const TensorTree& next =
          t + 1 < unrolled.step_params.size() ? unrolled.step_params[t + 1] : unrolled.final_params;
      steps.updates.push_back(add(next, scale(unrolled.step_params[t], -1.0)));
    }
    append_optimizer_outputs(run.outputs, n, steps);
    whole.coefficients = unrolled.step_clip_coefficients;
    whole.updates = steps.updates;
  }
  whole.query_gradient = reference::spd_query_gradient(setup, unrolled.final_params);
  whole.hvp_initial = reference::spd_batch_hvp(setup, p.initial_params, p.initial_sources, w, 0, v);
  whole.hvp_final = reference::spd_batch_hvp(setup, unrolled.final_params, unrolled.final_sources, w, last, v);
  whole.last = last;
  whole.scores = unrolled.scores;
  run.trace = whole.entries();
  append_trained_outputs(run.outputs, n, whole.query_gradient, whole.hvp_initial, whole.hvp_final,
                         replay_state_reference(settings.topology.world_size()),
                         replay_product_rows(n, whole.query_gradient, clip_vjp_row, dw_row), unrolled.final_params,
                         unrolled.final_sources, unrolled.scores);
  for (size_t t = 0; t < unrolled.step_params.size(); ++t) {
    run.states.push_back(TrainState{unrolled.step_params[t], unrolled.step_opt[t], unrolled.step_sources[t]});
  }
  return run;
}

}  // namespace magic::checks
