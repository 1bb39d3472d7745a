#include "lib/model/sequence_layout.h"

namespace magic {

SequenceLayout SequenceLayout::whole(int64_t length) {
  SequenceLayout layout;
  layout.padded_length = length;
  layout.columns = at::arange(length, at::kLong);
  layout.positions = layout.position_ids = layout.key_positions = layout.columns;
  layout.gather_keys = [](const at::Tensor& kv) { return kv; };
  return layout;
}

}  // namespace magic
