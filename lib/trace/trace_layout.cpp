#include "lib/trace/trace_layout.h"

namespace magic {
namespace {

std::vector<Placement> with_length(std::vector<Placement> placements, int64_t length) {
  for (auto& p : placements) {
    if (p.type == Placement::Type::kZigzag) p.length = length;
  }
  return placements;
}

}  // namespace

std::vector<Placement> TraceLayout::activations(int64_t length) const {
  return with_length(rows_and_columns, length);
}

std::vector<Placement> TraceLayout::residual(int64_t length) const {
  return residual_stream.empty() ? activations(length) : with_length(residual_stream, length);
}

std::vector<Placement> TraceLayout::logits(int64_t length) const {
  return rows_columns_and_vocabulary.empty() ? activations(length) : with_length(rows_columns_and_vocabulary, length);
}

const std::vector<Placement>& TraceLayout::parameter(const std::string& name) const {
  const std::string grid = parameter_grid(name);
  const auto& by_name = grid.empty() ? parameters_by_name : grids.at(grid).parameters_by_name;
  const auto it = by_name.find(name);
  return it != by_name.end() ? it->second : grid.empty() ? parameters : grids.at(grid).parameters;
}

std::string TraceLayout::parameter_grid(const std::string& name) const {
  for (const auto& [grid, g] : grids) {
    if (name.rfind(g.prefix, 0) == 0) return grid;
  }
  return "";
}

std::vector<Placement> TraceLayout::replicated() const {
  return std::vector<Placement>(mesh.size(), Placement::replicate());
}

}  // namespace magic
