// The causal-LM training step and query loss over a tokenized dataset, written once for the
// single-process engine and for data-parallel ranks (the Parallelism strategy decides the
// local rows, the normalizer and how the gradient is reduced), with gradient accumulation over
// the micro-batches of this rank's rows (micro_batches.h; one micro-batch by default).
//   L_t(θ, w) = Σ_m reduce(w_m · ℓ_ε(θ; micro-batch m of batch_t))    (lm_loss.h; ε the label
//               smoothing; `mean` divides every micro-batch by the global batch's valid labels)
//   g = Σ_m ∇θ L_t,m (reduced across ranks), optionally clipped;  (θ', o') = optimizer(θ, g, o)
// under the run's precision policy (mixed_precision.h: compute dtype, loss scale, reduce dtype).
// A multimodal run (`prefix`, with the datasets' patches) computes each row's first P columns from
// its patch features (prefix_encoder.h); its batch is one micro-batch.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "lib/data/data_stream.h"
#include "lib/data/token_dataset.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"
#include "lib/optim/optimizer.h"
#include "lib/step/micro_batches.h"
#include "lib/step/mixed_precision.h"
#include "lib/step/parallelism.h"
#include "lib/step/prefix_encoder.h"
#include "lib/step/step_function.h"

namespace magic {

class LmStep : public StepFunction {
 public:
  LmStep(GptConfig model, std::shared_ptr<const TokenDataset> data, const DataStream& stream, Reduction reduction,
         double label_smoothing, std::shared_ptr<const Optimizer> optimizer, std::optional<double> clip_norm,
         std::shared_ptr<const Parallelism> parallelism = std::make_shared<SingleProcess>(),
         std::shared_ptr<const MixedPrecision> precision = std::make_shared<MixedPrecision>(),
         std::shared_ptr<const MicroBatches> micro_batches = std::make_shared<MicroBatches>(),
         std::shared_ptr<const PrefixEncoder> prefix = nullptr);

  int64_t num_steps() const override { return static_cast<int64_t>(batches_.size()); }
  StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const override;
  at::Tensor assemble_weight_gradient(const at::Tensor& local) const override;
  double cotangent_scale() const override { return precision_->policy().loss_scale; }
  bool runs_collectives() const override { return parallelism_->runs_collectives(); }
  TraceLayout trace_layout() const override { return trace_layout_; }

  TensorTree gradient(const TrainState& state, int64_t t, const at::Tensor& w, bool create_graph) const override;
  // Step t's training loss (global value): the sum of its micro-batches' losses.
  at::Tensor loss(const TensorTree& params, int64_t t, const at::Tensor& w) const;

  const Batch& local_batch(int64_t t) const { return batches_.at(t); }

 private:
  // Micro-batch m of step t (this rank's share) through pipeline chunk `stage` with the computed
  // parameters: its loss, the `mean` reduction divided by `mean_denominator` (stage.heads), or its
  // hidden states.
  at::Tensor micro_batch_forward(int64_t t, int64_t m, const PipelineStage& stage, const TensorTree& computed,
                                 const at::Tensor& input, const at::Tensor& w, double mean_denominator) const;
  // Step t's micro-batches for Parallelism::micro_batch_gradients.
  MicroBatchPass micro_batch_pass(int64_t t, const at::Tensor& w, const std::vector<double>& denominators) const;
  // The `mean` denominator of each micro-batch of step t (micro_batches.h); ones without `mean`.
  std::vector<double> micro_batch_denominators(int64_t t) const;
  // The gradient and, detached, the loss it was taken of (this rank's share), which step()
  // reports so that a run can be watched without a second forward pass.
  std::pair<TensorTree, at::Tensor> gradient_and_loss(const TrainState& state, int64_t t, const at::Tensor& w,
                                                      bool create_graph) const;
  GptConfig model_;
  std::shared_ptr<const TokenDataset> data_;
  std::vector<std::vector<int64_t>> step_rows_;    // every rank's rows of each step
  std::vector<Batch> batches_;                     // this rank's rows of each step
  std::vector<std::vector<Batch>> micro_batches_;  // the same rows as micro-batches
  Reduction reduction_;
  TokenLoss token_loss_;  // the training loss's vocabulary and label smoothing
  std::shared_ptr<const Optimizer> optimizer_;
  std::optional<double> clip_norm_;
  std::shared_ptr<const Parallelism> parallelism_;
  std::shared_ptr<const MixedPrecision> precision_;
  std::shared_ptr<const MicroBatches> micro_batching_;
  std::shared_ptr<const PrefixEncoder> prefix_;
  TraceLayout trace_layout_;  // parallelism_'s
};

// Q(θ) = mean over query documents of each document's mean next-token loss (unweighted) over all
// its chunks' label positions: a query longer than max_len is one query. Query J (per-query mode)
// is document J. Each rank evaluates its share of the chunks; with a prefix whose rows must split
// evenly (PrefixEncoder::row_multiple) the chunks are padded with empty ones that count for nothing.
class LmQuery : public QueryFunction {
 public:
  LmQuery(GptConfig model, TokenDataset queries,
          std::shared_ptr<const Parallelism> parallelism = std::make_shared<SingleProcess>(),
          std::shared_ptr<const MixedPrecision> precision = std::make_shared<MixedPrecision>(),
          std::shared_ptr<const PrefixEncoder> prefix = nullptr);

  int64_t num_queries() const override { return documents_; }
  at::Tensor loss(const TensorTree& params, std::optional<int64_t> index = std::nullopt) const override;
  TensorTree gradient(const TensorTree& params, std::optional<int64_t> index = std::nullopt) const override;
  const TokenDataset& queries() const { return queries_; }

 private:
  // This rank's partial sum of Q (stage.heads) or its hidden states, through pipeline chunk `stage`.
  at::Tensor local_loss(const PipelineStage& stage, const TensorTree& computed, const at::Tensor& input,
                        std::optional<int64_t> index) const;
  MicroBatchPass pass(std::optional<int64_t> index) const;
  GptConfig model_;
  TokenDataset queries_;
  int64_t documents_ = 0;
  std::vector<int64_t> local_;           // this rank's query chunks (queries_.size(): a padding chunk)
  std::vector<int64_t> local_document_;  // the document of each (-1: padding)
  at::Tensor all_patches_;               // with a prefix: every rank's chunks' patch features
  std::vector<double> document_labels_;  // label positions of each document, over all its chunks
  at::Tensor local_ids_, local_labels_;
  std::shared_ptr<const Parallelism> parallelism_;
  std::shared_ptr<const MixedPrecision> precision_;
  std::shared_ptr<const PrefixEncoder> prefix_;
};

}  // namespace magic
