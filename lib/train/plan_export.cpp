#include "lib/train/plan_export.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "lib/core/dtype.h"
#include "lib/core/error.h"
#include "lib/core/fnv1a.h"
#include "lib/core/strings.h"
#include "lib/data/tokenizer.h"
#include "lib/io/atomic_file.h"
#include "lib/io/atomic_folder.h"
#include "lib/io/safetensors.h"
#include "lib/io/score_file.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"
#include "lib/optim/clip.h"
#include "lib/train/memory_estimate.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
// Ordered, so that plan.json reads top-down in the order docs/plan-format.md describes it.
using Json = nlohmann::ordered_json;

// The safetensors dtype codes of the tensors a plan holds.
std::string dtype_code(c10::ScalarType type) {
  switch (type) {
    case c10::kDouble:
      return "F64";
    case c10::kFloat:
      return "F32";
    case c10::kLong:
      return "I64";
    default:
      throw std::logic_error(str_cat("plan: no safetensors code for ", c10::toString(type)));
  }
}

Json model_json(const GptConfig& m, const TensorTree& init) {
  Json parameters = Json::array();
  for (const auto& p : init) parameters.push_back({{"name", p.name}, {"shape", p.tensor.sizes().vec()}});
  Json model = {{"architecture", "gpt"},
                {"vocab", m.vocab},
                {"d_model", m.d_model},
                {"n_layers", m.n_layers},
                {"n_heads", m.n_heads},
                {"head_dim", m.d_model / m.n_heads},
                {"mlp_hidden", 4 * m.d_model},
                {"max_len", m.max_len},
                {"positions", m.positions == Positions::kRotary ? "rotary" : "learned"},
                {"norm", "pre_layernorm"},
                {"layer_norm_eps", m.layer_norm_eps},
                {"activation", m.activation == Activation::kGeluTanh ? "gelu_tanh" : "gelu_erf"},
                {"residual", m.parallel_residual ? "parallel" : "sequential"},
                {"attention_scale", attention_scale_of(m)},
                {"attention_mask", "causal"},
                {"tied_embeddings", m.tied_head},
                {"head_bias", false},
                {"dropout", 0.0},
                {"parameters", parameters}};
  if (m.positions == Positions::kRotary) {
    model["rotary_dims"] = m.rotary_dims;
    model["rotary_base"] = m.rotary_base;
  }
  return model;
}

Json precision_json(const PrecisionPolicy& p) {
  return {{"compute", dtype_name(p.compute)},
          {"master", dtype_name(p.master)},
          {"reduce", dtype_name(p.reduce)},
          {"loss_scale", p.loss_scale}};
}

Json loss_json(const RunConfig& c) {
  return {{"token_loss", "next_token_cross_entropy"},
          {"reduction", reduction_name(c.reduction)},
          {"label_smoothing", c.label_smoothing},
          {"weights", weight_kind_name(c.weights)},
          {"ignore_target", kIgnoreLabel}};
}

std::string schedule_name(LrSchedule::Kind kind) {
  switch (kind) {
    case LrSchedule::Kind::kConstant:
      return "constant";
    case LrSchedule::Kind::kLinear:
      return "linear";
    case LrSchedule::Kind::kCosine:
      return "cosine";
  }
  return "?";
}

Json optimizer_json(const RunConfig& c) {
  const OptimizerConfig& o = c.optimizer;
  // The rate of every step, as the optimizer reads it (the schedule at the update count before
  // it is incremented, which is the step's index: the plan's run starts at count 0).
  Json lr = Json::array();
  for (int64_t t = 0; t < c.steps; ++t) lr.push_back(o.schedule.at(t));
  Json j = {{"name", o.name},
            {"lr", lr},
            {"schedule",
             {{"name", schedule_name(o.schedule.kind)},
              {"peak", o.schedule.peak},
              {"final", o.schedule.final_value},
              {"warmup_steps", o.schedule.warmup_steps},
              {"total_steps", o.schedule.total_steps}}},
            {"weight_decay", o.weight_decay},
            {"weight_decay_mode", o.name == "adamw" ? "decoupled" : "l2"}};
  if (o.name == "sgd") {
    j["momentum"] = o.momentum;
    j["dampening"] = o.dampening;
    j["nesterov"] = o.nesterov;
  } else {
    j["beta1"] = o.beta1;
    j["beta2"] = o.beta2;
    j["eps"] = o.eps;
    j["eps_root"] = o.eps_root;
  }
  if (o.clip_norm) {
    j["clip"] = {{"max_norm", *o.clip_norm}, {"norm", "global_l2"}, {"epsilon", kClipNormEpsilon}};
  } else {
    j["clip"] = nullptr;
  }
  return j;
}

// Every step's batch exactly as LmStep consumes it, stacked over steps.
TensorTree batch_tensors(const RunConfig& c, const LmProblem& p) {
  const int64_t N = p.train->size(), T = p.train->max_len();
  const auto real = at::TensorOptions().dtype(c.precision.master);
  std::vector<at::Tensor> ids, targets, examples, divisors;
  for (int64_t t = 0; t < c.steps; ++t) {
    const Batch& b = p.step->local_batch(t);
    if (b.rows.size(0) != c.batch_size) throw std::logic_error("export_plan: a batch is a rank's share, not the whole");
    at::Tensor target = next_token_targets(b.labels, T);  // [B, T]: column j holds the token j predicts
    at::Tensor valid = target.ne(kIgnoreLabel).to(c.precision.master);
    at::Tensor divisor;
    switch (c.reduction) {
      case Reduction::kMean:  // the batch's valid targets, the same for every row
        divisor = valid.sum().expand({c.batch_size}).clone();
        break;
      case Reduction::kSumOfMeans:  // each row's own valid targets, at least 1 (padding rows have none)
        divisor = valid.sum(1).clamp_min(1.0);
        break;
      case Reduction::kSum:
        divisor = at::ones({c.batch_size}, real);
        break;
    }
    ids.push_back(b.input_ids);
    targets.push_back(target);
    examples.push_back(at::where(b.rows.eq(N), at::full({}, -1, b.rows.options()), b.rows));  // -1: padding row
    divisors.push_back(divisor);
  }
  TensorTree out;
  out.insert("input_ids", at::stack(ids).contiguous());
  out.insert("targets", at::stack(targets).contiguous());
  out.insert("example_index", at::stack(examples).contiguous());
  out.insert("row_divisor", at::stack(divisors).contiguous());
  out.insert("weights", p.weights.detach().contiguous());
  return out;
}

TensorTree query_tensors(const LmProblem& p) {
  const TokenDataset& q = p.query->queries();
  std::vector<int64_t> document;
  for (const auto& ex : q.examples) document.push_back(ex.document);
  TensorTree out;
  out.insert("input_ids", q.input_ids.contiguous());
  out.insert("targets", next_token_targets(q.labels, q.max_len()).contiguous());
  out.insert("document", at::tensor(document, at::kLong));
  return out;
}

// Saves `tensors` as `name` in `dir` and describes the file for plan.json: its size, an FNV-1a
// checksum of its bytes (lib/core/fnv1a.h), and each tensor's dtype and shape.
Json save_described(const std::string& dir, const std::string& name, const TensorTree& tensors) {
  const std::string path = (fs::path(dir) / name).string();
  save_safetensors(path, tensors, {{"format", kPlanFormat}, {"version", std::to_string(kPlanVersion)}});
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw InputError(path + ": cannot read back what was written");
  Json described = Json::array();
  for (const auto& t : tensors) {
    described.push_back(
        {{"name", t.name}, {"dtype", dtype_code(t.tensor.scalar_type())}, {"shape", t.tensor.sizes().vec()}});
  }
  return {{"file", name},
          {"bytes", bytes.size()},
          {"fnv1a64", hex16(fnv1a(kFnvBasis, bytes.data(), bytes.size()))},
          {"tensors", described}};
}

std::vector<std::string> printable(const std::vector<std::string>& texts) {
  std::vector<std::string> out;
  for (const auto& t : texts) out.push_back(printable_text(t));
  return out;
}

}  // namespace

void require_plan_expressible(const RunConfig& config, const std::string& flag) {
  const PrecisionPolicy& p = config.precision;
  if (p.compute != p.master || p.reduce != p.master || p.loss_scale != 1.0) {
    throw InputError(str_cat(flag, ": ", config.source, " runs the mixed-precision policy '", p.str(),
                             "', which a plan cannot state (casts between compute and master, loss scaling and "
                             "the CPU's fp32 fallbacks); export a plan of a run with dtype fp64 or fp32"));
  }
  if (config.encoder) {
    throw InputError(str_cat(flag, ": ", config.source,
                             " is a multimodal run (its \"encoder\" section), which the "
                             "plan format cannot state yet (it has no patch features or encoder); export a text-only "
                             "run"));
  }
}

void export_plan(const std::string& dir, const RunConfig& c, const LmProblem& p, const PlanOptions& options) {
  require_plan_expressible(c, "--export-plan");
  const int64_t N = p.train->size(), T = p.train->max_len();
  std::vector<std::string> example_ids, query_ids;
  for (const auto& ex : p.train->examples) example_ids.push_back(ex.id);
  for (const auto& d : p.query_documents) query_ids.push_back(d.id);
  const int64_t Q = static_cast<int64_t>(query_ids.size());

  std::vector<int64_t> score_shape = options.per_query ? std::vector<int64_t>{Q, N} : std::vector<int64_t>{N};
  if (c.weights == WeightKind::kPerToken) score_shape.push_back(T);

  write_folder_atomically(dir, "--export-plan", [&](const std::string& temp) {
    Json files = Json::array();
    files.push_back(save_described(temp, "init.safetensors", p.initial.params));
    files.push_back(save_described(temp, "batches.safetensors", batch_tensors(c, p)));
    files.push_back(save_described(temp, "queries.safetensors", query_tensors(p)));
    Json plan = {
        {"format", kPlanFormat},
        {"version", kPlanVersion},
        {"source", {{"tool", "magic-run"}, {"config", options.config_path}}},
        {"seed", c.seed},
        {"dtype", precision_json(c.precision)},
        {"model", model_json(p.model, p.initial.params)},
        {"data",
         {{"examples", N},
          {"sequence_length", T},
          {"pad_token", p.train->pad_id},
          {"example_ids", printable(example_ids)}}},
        {"loss", loss_json(c)},
        {"optimizer", optimizer_json(c)},
        {"training",
         {{"steps", c.steps},
          {"batch_size", c.batch_size},
          {"shuffle", c.shuffle},
          {"checkpoints",
           {{"schedule", checkpoint_schedule_name(c.checkpoints)}, {"steps", run_checkpoint_plan(c).steps}}}}},
        {"queries",
         {{"documents", Q},
          {"chunks", p.query->queries().size()},
          {"ids", printable(query_ids)},
          {"loss", "mean_of_document_means"},
          {"per_query", options.per_query}}},
        {"scores",
         {{"tensor", "scores"}, {"shape", score_shape}, {"dtype", dtype_code(c.precision.master)}, {"of", "dQ/dw"}}},
        {"files", files}};
    write_file_atomically((fs::path(temp) / "plan.json").string(), plan.dump(2) + "\n");
  });
}

}  // namespace magic
