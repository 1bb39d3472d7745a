// The single-process causal-LM training step and query loss over a tokenized dataset.
//   L_t(θ, w) = reduce(w_batch · ℓ(θ; batch_t))      (lm_loss.h; mean over the batch's valid labels)
//   g = ∇θ L_t, optionally clipped;  (θ', o') = optimizer(θ, g, o)
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "lib/data/data_stream.h"
#include "lib/data/token_dataset.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"
#include "lib/optim/optimizer.h"
#include "lib/train/step_function.h"

namespace magic {

class LmStep : public StepFunction {
 public:
  LmStep(GptConfig model, std::shared_ptr<const TokenDataset> data, const DataStream& stream, Reduction reduction,
         std::shared_ptr<const Optimizer> optimizer, std::optional<double> clip_norm);

  int64_t num_steps() const override { return static_cast<int64_t>(batches_.size()); }
  StepOutput step(const TrainState& s, int64_t t, const at::Tensor& w, bool traced) const override;

  const Batch& batch(int64_t t) const { return batches_.at(t); }

 private:
  GptConfig model_;
  std::shared_ptr<const TokenDataset> data_;
  std::vector<Batch> batches_;
  Reduction reduction_;
  std::shared_ptr<const Optimizer> optimizer_;
  std::optional<double> clip_norm_;
};

// Q(θ) = mean over queries of each query's mean next-token loss (unweighted).
class LmQuery : public QueryFunction {
 public:
  LmQuery(GptConfig model, TokenDataset queries);

  int64_t num_queries() const override { return queries_.size(); }
  at::Tensor loss(const TensorTree& params, std::optional<int64_t> index = std::nullopt) const override;
  const TokenDataset& queries() const { return queries_; }

 private:
  GptConfig model_;
  TokenDataset queries_;
};

}  // namespace magic
