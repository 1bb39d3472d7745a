#include "lib/distributed/parallel/bridged_prefix.h"

#include <algorithm>

namespace magic::dist {

BridgedPrefix::BridgedPrefix(PatchEncoderConfig config, const BridgeLayout& layout, int rank,
                             std::shared_ptr<const TensorParallel> tensor, std::shared_ptr<const Bridge> bridge)
    : config_(config),
      layout_(layout),
      rank_(rank),
      multiple_(std::max(layout.topology().encoder.dp, layout.topology().lm.dp)),
      tensor_(std::move(tensor)),
      bridge_(std::move(bridge)) {}

at::Tensor BridgedPrefix::embed(const TensorTree& params, const at::Tensor& patches, const at::Tensor& columns) const {
  const auto [first, count] = layout_.encoder_rows(rank_, patches.size(0));
  const at::Tensor encoded = patch_encoder_forward(config_, params, patches.narrow(0, first, count), *tensor_);
  return bridge_->to_lm(encoded, columns);
}

}  // namespace magic::dist
