// DataStream: which examples form the batch of each training step, deterministically from one
// seed. Epoch e visits a permutation drawn from derive_seed(seed, "epoch", e); batches are
// consecutive slices of it; the last batch of an epoch is filled up with the padding row
// (index N: all labels ignored, weight 0). Data weights are one leaf tensor shared by all
// epochs: [N] per document or [N, T] per token.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lib/data/token_dataset.h"

namespace magic {

enum class WeightKind { kPerDocument, kPerToken };
WeightKind parse_weight_kind(const std::string& name, const std::string& what = "weights");
std::string weight_kind_name(WeightKind kind);

struct StreamConfig {
  int64_t batch_size = 8;
  int64_t steps = 1;
  uint64_t seed = 0;
  bool shuffle = true;
};

class DataStream {
 public:
  // Throws InputError when there are fewer examples than one batch, or batch_size/steps < 1.
  DataStream(int64_t num_examples, StreamConfig config, const std::string& source = "data");

  int64_t num_steps() const { return config_.steps; }
  int64_t batch_size() const { return config_.batch_size; }
  int64_t num_examples() const { return num_examples_; }
  int64_t padding_row() const { return num_examples_; }
  int64_t batches_per_epoch() const { return (num_examples_ + config_.batch_size - 1) / config_.batch_size; }

  // The example rows of step t's batch (batch_size entries; padding_row() pads).
  std::vector<int64_t> rows(int64_t step) const;

 private:
  int64_t num_examples_;
  StreamConfig config_;
};

// The inputs of one batch, gathered by row (the padding row is all end-of-document / ignored).
struct Batch {
  at::Tensor rows;       // [B] int64
  at::Tensor input_ids;  // [B, T]
  at::Tensor labels;     // [B, T]
};
Batch make_batch(const TokenDataset& data, const std::vector<int64_t>& rows);

// All-ones data weights: [N] or [N, T].
at::Tensor initial_weights(const TokenDataset& data, WeightKind kind, c10::ScalarType dtype);

// The weights of `rows`, a zero row standing for the padding row. Differentiable in w
// (index_select, whose adjoint scatters back into w).
at::Tensor gather_weights(const at::Tensor& w, const at::Tensor& rows);

}  // namespace magic
