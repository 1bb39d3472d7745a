#include "lib/train/lm_step.h"

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/error.h"
#include "lib/core/run_device.h"
#include "lib/core/strings.h"
#include "lib/data/patch_features.h"
#include "lib/data/tokenizer.h"
#include "lib/model/vocab_parallel_loss.h"
#include "lib/optim/clip.h"
#include "lib/trace/trace_context.h"
#include "lib/trace/trace_sink.h"

namespace magic {
LmStep::LmStep(GptConfig model, std::shared_ptr<const TokenDataset> data, const DataStream& stream, Reduction reduction,
               double label_smoothing, std::shared_ptr<const Optimizer> optimizer, std::optional<double> clip_norm,
               std::shared_ptr<const Parallelism> parallelism, std::shared_ptr<const MixedPrecision> precision,
               std::shared_ptr<const MicroBatches> micro_batches, std::shared_ptr<const PrefixEncoder> prefix)
    : model_(model),
      data_(std::move(data)),
      reduction_(reduction),
      token_loss_{model.vocab, label_smoothing},
      optimizer_(std::move(optimizer)),
      clip_norm_(clip_norm),
      parallelism_(std::move(parallelism)),
      precision_(std::move(precision)),
      micro_batching_(std::move(micro_batches)),
      prefix_(std::move(prefix)),
      trace_layout_(parallelism_->trace_layout()) {
  if (prefix_ && (micro_batching_->count() > 1 || !data_->patches.defined())) {
    throw InputError(
        micro_batching_->count() > 1
            ? "a multimodal step runs its batch whole: gradient accumulation (mb) is not supported with an "
              "encoder prefix"
            : "a multimodal step needs the training data's patch features");
  }
  for (int64_t t = 0; t < stream.num_steps(); ++t) {
    step_rows_.push_back(stream.rows(t));
    if (prefix_ && step_rows_.back().size() % prefix_->row_multiple() != 0) {
      throw InputError(str_cat("a batch of ", step_rows_.back().size(),
                               " rows: the encoder and language model split it evenly only in multiples of ",
                               prefix_->row_multiple()));
    }
    const std::vector<int64_t> rows = parallelism_->local_share(step_rows_.back());
    batches_.push_back(make_batch(*data_, rows));
    std::vector<Batch> parts;
    for (const auto& part : micro_batching_->split(rows)) parts.push_back(make_batch(*data_, part));
    micro_batches_.push_back(std::move(parts));
  }
}

namespace {

// This rank's columns of a batch: tokens, aligned targets and aligned weights, all selected by
// one index_select of the padded batch (its adjoint scatters dw back to the original columns).
struct LocalColumns {
  at::Tensor input_ids, targets, weights;
  // The batch is gathered on the host; the step computes where its parameters are (run_device.h).
  LocalColumns to(const at::Device& device) const {
    return {input_ids.to(device), targets.to(device), weights.to(device)};
  }
};

LocalColumns local_columns(const SequenceLayout& layout, const at::Tensor& input_ids, const at::Tensor& labels,
                           const at::Tensor& weights, int64_t pad_id) {
  const int64_t P = layout.padded_length, T = input_ids.size(1);
  if (P == T && layout.columns.size(0) == T) {  // the whole sequence: nothing to select
    return {input_ids, next_token_targets(labels, T), next_token_weights(weights, T)};
  }
  at::Tensor ids = P == T ? input_ids : at::constant_pad_nd(input_ids, {0, P - T}, pad_id);
  LocalColumns local{ids.index_select(1, layout.columns), next_token_targets(labels, P).index_select(1, layout.columns),
                     next_token_weights(weights, P)};
  if (local.weights.size(1) > 1) local.weights = local.weights.index_select(1, layout.columns);
  return local;
}

}  // namespace

std::vector<double> LmStep::micro_batch_denominators(int64_t t) const {
  const std::vector<Batch>& parts = micro_batches_.at(t);
  if (reduction_ != Reduction::kMean) return std::vector<double>(parts.size(), 1.0);
  std::vector<double> labels;
  for (const Batch& part : parts) {
    const SequenceLayout layout = parallelism_->model_layout(part.input_ids.size(1)).sequence;
    const at::Tensor ones = at::ones({part.input_ids.size(0)}, at::kDouble);
    labels.push_back(local_columns(layout, part.input_ids, part.labels, ones, data_->pad_id)
                         .targets.ne(kIgnoreLabel)
                         .sum()
                         .item<double>());
  }
  return micro_batching_->denominators(*parallelism_, labels);
}

MicroBatchPass LmStep::micro_batch_pass(int64_t t, const at::Tensor& w, const std::vector<double>& denominators) const {
  MicroBatchPass pass;
  pass.count = static_cast<int64_t>(denominators.size());
  pass.enter = [this](const TensorTree& stored) { return precision_->entered_params(*parallelism_, stored); };
  pass.to_compute = [this](const TensorTree& entered) { return precision_->to_compute(entered); };
  pass.forward = [this, t, w, denominators](int64_t m, const PipelineStage& stage, const TensorTree& computed,
                                            const at::Tensor& input) {
    return micro_batch_forward(t, m, stage, computed, input, w, denominators.at(static_cast<size_t>(m)));
  };
  pass.hidden_shape = [this, t](int64_t m) {
    const Batch& batch = micro_batches_.at(t).at(m);
    const ModelLayout layout = parallelism_->model_layout(batch.input_ids.size(1));
    return std::vector<int64_t>{batch.input_ids.size(0), layout.embedded_positions().size(0), model_.d_model};
  };
  pass.scale_loss = [this](const at::Tensor& loss) { return precision_->scale_loss(loss); };
  pass.accumulate = [this](const TensorTree& sum, const TensorTree& next) { return precision_->accumulate(sum, next); };
  if (w.requires_grad()) pass.inputs.push_back(w);
  return pass;
}

at::Tensor LmStep::loss(const TensorTree& params, int64_t t, const at::Tensor& w) const {
  const std::vector<at::Tensor> losses =
      parallelism_->micro_batch_losses(params, micro_batch_pass(t, w, micro_batch_denominators(t)));
  at::Tensor total;
  for (const at::Tensor& part : losses) total = total.defined() ? total + part : part;
  if (!total.defined())
    total = at::zeros({}, at::TensorOptions().dtype(precision_->policy().master).device(device_of(params)));
  return total;
}

// With more than one micro-batch its trace records (activations, the loss) name it: they hold the
// micro-batch's rows, placed as this rank's share of every rank's micro-batch m (docs/dump-format.md,
// `micro_batch`).
at::Tensor LmStep::micro_batch_forward(int64_t t, int64_t m, const PipelineStage& stage, const TensorTree& computed,
                                       const at::Tensor& input, const at::Tensor& w, double mean_denominator) const {
  const Batch& batch = micro_batches_.at(t).at(m);
  ModelLayout layout = parallelism_->model_layout(batch.input_ids.size(1));
  layout.stage = stage;
  const at::Device device = device_of(computed);
  const LocalColumns local =
      local_columns(layout.sequence, batch.input_ids, batch.labels, gather_weights(w, batch.rows), data_->pad_id)
          .to(device);
  // The model's activation records (its blocks' outputs) are placed as the residual stream of this
  // rank's rows and columns: a shard of the columns over tp under sp.
  const int64_t length = batch.input_ids.size(1);
  std::optional<ScopedTraceContext> placed;
  if (tracing() && trace_context().active) {
    TraceContext context = trace_context();
    context.activation_placements = trace_layout_.residual(length);
    if (micro_batching_->count() > 1) context.micro_batch = m;
    placed.emplace(std::move(context));
  }
  if (tracing() && stage.embeds) {
    trace_activation(local.input_ids, "input_ids", "input", "", trace_layout_.activations(length));
  }
  at::Tensor prefix;
  if (prefix_ && stage.embeds) {
    prefix = prefix_->embed(computed, patches_of_rows(data_->patches, step_rows_.at(t)).to(device),
                            prefix_columns(layout.sequence.columns, prefix_->length()).to(device));
  }
  at::Tensor logits = gpt_forward(model_, computed, stage.embeds ? local.input_ids : input, layout, prefix);
  if (!stage.heads) return logits;  // hidden states for the next pipeline chunk
  if (tracing()) trace_activation(logits, "logits", "logits", "head", trace_layout_.logits(length));
  at::Tensor losses =
      vocab_parallel_position_losses(precision_->to_master(logits), local.targets, token_loss_, *layout.tensor);
  at::Tensor mask = local.targets.ne(kIgnoreLabel).to(losses.scalar_type());
  const double denominator = reduction_ == Reduction::kMean ? mean_denominator : 1.0;
  at::Tensor row_labels = label_mask(batch.labels, losses.scalar_type()).sum(1).to(device);
  at::Tensor loss = reduce_aligned_loss(losses, mask, local.weights, reduction_, denominator, row_labels);
  if (tracing() && trace_context().active) {
    trace_point(loss, [&] {
      return TraceRecord{"loss", "loss", "forward", "forward", t, "", trace_layout_.loss, trace_context().micro_batch};
    });
  }
  return loss;
}

namespace {

// One record per parameter of a step's gradient or update (lib/trace): what the optimizer was
// given and what it did, each placed as its parameter.
void trace_step_tree(const TensorTree& tree, const char* kind, const char* phase, int64_t t,
                     const TraceLayout& layout) {
  if (tracing() && trace_context().active) trace_parameter_tree(tree, {"", kind, phase, "first", t, "", {}}, layout);
}

}  // namespace

TensorTree LmStep::gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const {
  return gradient_and_loss(state, t, w, create_graph).first;
}

std::pair<TensorTree, at::Tensor> LmStep::gradient_and_loss(const TrainState& state, int64_t t, const at::Tensor& w,
                                                            bool create_graph) const {
  const TensorTree& params = state.params;
  // A gradient asked for on its own (a check's gradient at a given state) is a training step's
  // first-order records too; one that will be differentiated again is not.
  std::optional<ScopedTraceContext> context;
  if (tracing() && !trace_context().active && !create_graph)
    context.emplace(TraceContext{true, t, "forward", {}, -1, {}});
  MicroBatchGradients result =
      parallelism_->micro_batch_gradients(params, micro_batch_pass(t, w, micro_batch_denominators(t)), create_graph);
  const TensorTree& local = result.gradient;
  // A pipeline stage without the loss reports a zero share, in the loss's dtype (summed over ranks).
  const at::Tensor unscaled =
      result.loss.defined()
          ? result.loss
          : at::zeros({}, at::TensorOptions().dtype(precision_->policy().master).device(device_of(params)));
  if (trace_layout_.backward_gradient_is_whole) trace_step_tree(local, "gradient", "backward", t, trace_layout_);
  TensorTree reduced = precision_->unscale(parallelism_->apply_convention(precision_->reduce(*parallelism_, local)));
  trace_step_tree(reduced, "reduced_gradient", "reduction", t, trace_layout_);
  return {reduced, unscaled};
}

StepOutput LmStep::step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const {
  // Training's steps are traced (lib/trace); REPLAY's traced recomputations of them are not.
  const ScopedTraceContext context(TraceContext{!traced && tracing(), t, "forward", {}, -1, {}});
  // Untraced steps still need leaves to differentiate the loss; traced ones use the caller's.
  const TensorTree params = traced ? s.params : s.params.requires_grad();
  auto [gradient_of_step, step_loss] =
      gradient_and_loss(TrainState{params, s.opt, s.persistent}, t, traced ? w : w.detach(), traced);
  TensorTree grads = std::move(gradient_of_step);

  at::AutoGradMode grad_mode(traced);
  at::Tensor coefficient;
  if (clip_norm_) {
    coefficient = clip_coefficient(*clip_norm_, parallelism_->global_norm(grads));
    grads = parallelism_->apply_clip(grads, coefficient);
    if (tracing() && trace_context().active) {
      trace_point(coefficient, [&] {
        return TraceRecord{"clip_coefficient", "other", "optimizer", "first", t, "", trace_layout_.replicated()};
      });
    }
  }
  grads = parallelism_->optimizer_input(grads);
  OptimizerUpdate update = optimizer_->update(traced ? params : params.detach(), grads, s.opt);
  if (tracing() && trace_context().active) {
    trace_step_tree(update.params.map_named([&](const std::string& name, const at::Tensor& p) {
      return p.detach() - params.at(name).detach();
    }),
                    "update", "optimizer", t, trace_layout_);
  }
  StepOutput out{TrainState{precision_->store(update.params), update.state, s.persistent}, grads, coefficient,
                 step_loss};
  if (!traced) {
    out.next = detach_state(out.next);
    out.grads = out.grads.detach();
    if (coefficient.defined()) out.clip_coefficient = coefficient.detach();
  }
  return out;
}

at::Tensor LmStep::assemble_weight_gradient(const at::Tensor& local) const {
  return parallelism_->assemble_weight_gradient(local);
}

LmQuery::LmQuery(GptConfig model, TokenDataset queries, std::shared_ptr<const Parallelism> parallelism,
                 std::shared_ptr<const MixedPrecision> precision, std::shared_ptr<const PrefixEncoder> prefix)
    : model_(model),
      queries_(std::move(queries)),
      parallelism_(std::move(parallelism)),
      precision_(std::move(precision)),
      prefix_(std::move(prefix)) {
  if (prefix_ && !queries_.patches.defined()) throw InputError("a multimodal query needs the queries' patch features");
  for (const auto& ex : queries_.examples) documents_ = std::max(documents_, ex.document + 1);
  document_labels_.assign(static_cast<size_t>(documents_), 0.0);
  const at::Tensor labels_per_chunk = label_mask(queries_.labels, at::kDouble).sum(1);
  std::vector<int64_t> all(queries_.size());
  for (int64_t j = 0; j < queries_.size(); ++j) {
    all[j] = j;
    document_labels_[queries_.examples[j].document] += labels_per_chunk[j].item<double>();
  }
  for (int64_t d = 0; d < documents_; ++d) {
    if (document_labels_[d] == 0.0) {
      throw InputError(str_cat("query document ", d, " has no chunk of >= 2 tokens: nothing to predict"));
    }
  }
  const int64_t multiple = prefix_ ? prefix_->row_multiple() : 1;
  while (static_cast<int64_t>(all.size()) % multiple != 0) all.push_back(queries_.size());
  if (prefix_) all_patches_ = patches_of_rows(queries_.patches, all);
  local_ = parallelism_->local_share(all);
  for (int64_t k : local_) local_document_.push_back(k < queries_.size() ? queries_.examples[k].document : -1);
  const Batch local = make_batch(queries_, local_);
  local_ids_ = local.input_ids;
  local_labels_ = local.labels;
}

MicroBatchPass LmQuery::pass(std::optional<int64_t> index) const {
  MicroBatchPass pass;  // the query's chunks are one micro-batch
  pass.enter = [this](const TensorTree& stored) { return precision_->entered_params(*parallelism_, stored); };
  pass.to_compute = [this](const TensorTree& entered) { return precision_->to_compute(entered); };
  pass.forward = [this, index](int64_t, const PipelineStage& stage, const TensorTree& computed,
                               const at::Tensor& input) { return local_loss(stage, computed, input, index); };
  pass.hidden_shape = [this](int64_t) {
    const ModelLayout layout = parallelism_->model_layout(local_ids_.size(1));
    return std::vector<int64_t>{local_ids_.size(0), layout.embedded_positions().size(0), model_.d_model};
  };
  pass.scale_loss = [this](const at::Tensor& loss) { return precision_->scale_loss(loss); };
  pass.accumulate = [this](const TensorTree& sum, const TensorTree& next) { return precision_->accumulate(sum, next); };
  return pass;
}

TensorTree LmQuery::gradient(const TensorTree& params_in, std::optional<int64_t> index) const {
  const TensorTree params = params_in.requires_grad();
  const TensorTree grads = parallelism_->micro_batch_gradients(params, pass(index), /*create_graph=*/false).gradient;
  return precision_->unscale(precision_->reduce(*parallelism_, grads)).detach();
}

at::Tensor LmQuery::loss(const TensorTree& params, std::optional<int64_t> index) const {
  const std::vector<at::Tensor> losses = parallelism_->micro_batch_losses(params, pass(index));
  const at::Tensor local =
      losses.empty() ? at::zeros({}, at::TensorOptions().dtype(precision_->policy().master).device(device_of(params)))
                     : losses.front();
  return with_global_value(*parallelism_, local);
}

at::Tensor LmQuery::local_loss(const PipelineStage& stage, const TensorTree& computed, const at::Tensor& input,
                               std::optional<int64_t> index) const {
  // Every rank runs the same operations (possibly on zero rows), so the collectives inside
  // enter()'s backward line up across ranks; a selection vector picks the queries that count.
  ModelLayout layout = parallelism_->model_layout(local_ids_.size(1));
  layout.stage = stage;
  const at::Device device = device_of(computed);
  const LocalColumns local =
      local_columns(layout.sequence, local_ids_, local_labels_, at::ones({local_ids_.size(0)}), queries_.pad_id)
          .to(device);
  at::Tensor prefix;
  if (prefix_ && stage.embeds) {
    prefix = prefix_->embed(computed, all_patches_.to(device),
                            prefix_columns(layout.sequence.columns, prefix_->length()).to(device));
  }
  at::Tensor logits = gpt_forward(model_, computed, stage.embeds ? local.input_ids : input, layout, prefix);
  if (!stage.heads) return logits;  // hidden states for the next pipeline chunk
  // The query loss is the plain cross-entropy: label smoothing is a training option (Q measures the model).
  at::Tensor losses = vocab_parallel_position_losses(precision_->to_master(logits), local.targets,
                                                     TokenLoss{model_.vocab, 0.0}, *layout.tensor);
  at::Tensor mask = local.targets.ne(kIgnoreLabel).to(losses.scalar_type());
  // A document's mean over all its chunks' labels: this rank's chunks and columns give a partial
  // sum of it, each chunk's sum over the document's label count.
  std::vector<double> weight(local_.size());
  for (size_t k = 0; k < local_.size(); ++k) {
    const int64_t d = local_document_[k];
    if (d < 0) continue;  // a padding chunk
    const double chosen = index ? (d == *index ? 1.0 : 0.0) : 1.0 / static_cast<double>(documents_);
    weight[k] = chosen / document_labels_[d];
  }
  at::Tensor per_chunk = (losses * mask).sum(1);
  at::Tensor select = at::tensor(weight, at::TensorOptions().dtype(at::kDouble)).to(per_chunk.options());
  return (per_chunk * select).sum();
}

}  // namespace magic
