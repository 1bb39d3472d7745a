#include "lib/model/sequence_layout.h"

namespace magic {

SequenceLayout SequenceLayout::whole(int64_t length) {
  SequenceLayout layout;
  layout.padded_length = length;
  layout.columns = at::arange(length, at::kLong);
  layout.positions = layout.position_ids = layout.key_positions = layout.columns;
  layout.gather_keys = [](const at::Tensor& kv) { return kv; };
  layout.keys_in_order = true;
  return layout;
}

SequenceLayout SequenceLayout::to(const at::Device& device) const {
  const auto moved = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
  return {padded_length,        moved(columns), moved(positions), moved(position_ids),
          moved(key_positions), gather_keys,    attend,           keys_in_order};
}

}  // namespace magic
