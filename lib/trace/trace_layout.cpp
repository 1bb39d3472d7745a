#include "lib/trace/trace_layout.h"

namespace magic {

std::vector<Placement> TraceLayout::activations(int64_t length) const {
  std::vector<Placement> out = rows_and_columns;
  for (auto& p : out) {
    if (p.type == Placement::Type::kZigzag) p.length = length;
  }
  return out;
}

std::vector<Placement> TraceLayout::replicated() const {
  return std::vector<Placement>(mesh.size(), Placement::replicate());
}

}  // namespace magic
