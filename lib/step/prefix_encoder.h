// The prefix of a multimodal step (docs/magic-check.md, "Encoder and language model: the
// bridge"): an encoder's outputs placed as the first columns of the language model's input, one
// per patch. LmStep and LmQuery ask it for the prefix of the rows they hold, with the parameters
// as the model computes with them (Parallelism::enter, in the compute dtype). A single process
// runs the encoder on the rows it holds (PatchPrefix); a colocated encoder on its own layout hands
// its outputs across a bridge (lib/distributed/parallel/bridged_prefix.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "lib/core/tensor_tree.h"
#include "lib/model/patch_encoder.h"

namespace magic {

class PrefixEncoder {
 public:
  virtual ~PrefixEncoder() = default;
  // P: the prefix positions of every sequence (its first P columns).
  virtual int64_t length() const = 0;
  // What every split of rows (a step's batch, the query chunks) must be a multiple of, so that
  // both sides of a bridge split it evenly: 1 in a single process.
  virtual int64_t row_multiple() const { return 1; }
  // [this rank's language-model rows of the batch, columns.numel(), d_model]: the prefix at
  // `columns` (the positions < P this rank's columns hold, in its order). `patches` [rows, P, F]:
  // the patch features of the whole batch (every rank's rows), in the batch's order.
  virtual at::Tensor embed(const TensorTree& params, const at::Tensor& patches, const at::Tensor& columns) const = 0;
};

// One process: the encoder on every row, no bridge.
class PatchPrefix : public PrefixEncoder {
 public:
  explicit PatchPrefix(PatchEncoderConfig config) : config_(config) {}
  int64_t length() const override { return config_.patches; }
  at::Tensor embed(const TensorTree& params, const at::Tensor& patches, const at::Tensor& columns) const override {
    return patch_encoder_forward(config_, params, patches).index_select(1, columns);
  }

 private:
  PatchEncoderConfig config_;
};

// The prefix positions among a layout's columns [T_local] (their true positions): those below
// `length`, which come first in every layout's order.
at::Tensor prefix_columns(const at::Tensor& columns, int64_t length);

}  // namespace magic
