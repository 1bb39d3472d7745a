// The prefix of a colocated encoder and language model (docs/magic-check.md, "Encoder and
// language model: the bridge"): this rank runs the encoder on its encoder shard of the batch's
// rows (split over the encoder's dp, its MLP over the encoder's tp), and the bridge carries the
// outputs to the rows and prefix columns this rank's language model holds:
//   prefix = bridge.to_lm(encoder(patches of this rank's encoder rows), columns)
// The batch's rows must split evenly over both sides' dp (row_multiple: max of the two).
#pragma once

#include <memory>

#include "lib/distributed/parallel/bridge.h"
#include "lib/distributed/parallel/bridge_layout.h"
#include "lib/step/prefix_encoder.h"

namespace magic::dist {

class BridgedPrefix : public PrefixEncoder {
 public:
  // `tensor`: the encoder's tensor-parallel operations on this rank; `bridge`: this rank's bridge
  // (a planted one in magic-check).
  BridgedPrefix(PatchEncoderConfig config, const BridgeLayout& layout, int rank,
                std::shared_ptr<const TensorParallel> tensor, std::shared_ptr<const Bridge> bridge);

  int64_t length() const override { return config_.patches; }
  int64_t row_multiple() const override { return multiple_; }
  at::Tensor embed(const TensorTree& params, const at::Tensor& patches, const at::Tensor& columns) const override;

 private:
  PatchEncoderConfig config_;
  BridgeLayout layout_;
  int rank_;
  int64_t multiple_;
  std::shared_ptr<const TensorParallel> tensor_;
  std::shared_ptr<const Bridge> bridge_;
};

}  // namespace magic::dist
