#include "lib/distributed/parallel/bridge.h"

#include "lib/distributed/collectives/collectives.h"

namespace magic::dist {

Bridge::Bridge(BridgeKind kind, std::shared_ptr<const Group> bridge, std::shared_ptr<const Group> cp)
    : kind_(kind), bridge_(std::move(bridge)), cp_(std::move(cp)) {}

at::Tensor Bridge::to_lm(const at::Tensor& encoder_out, const at::Tensor& columns) const {
  return select_columns(enter_cp(fan(encoder_out)), columns);
}

at::Tensor Bridge::fan(const at::Tensor& encoder_out) const {
  if (!bridge_ || kind_ == BridgeKind::kEqual) return encoder_out;
  return kind_ == BridgeKind::kFanIn ? gather_from_group(encoder_out, *bridge_) : split_to_group(encoder_out, *bridge_);
}

at::Tensor Bridge::enter_cp(const at::Tensor& prefix) const {
  return cp_ ? copy_to_group(prefix, *cp_) : prefix;
}

at::Tensor Bridge::select_columns(const at::Tensor& prefix, const at::Tensor& columns) const {
  return prefix.index_select(1, columns);
}

}  // namespace magic::dist
