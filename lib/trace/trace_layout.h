// How one rank's traced tensors make up the whole across the ranks' mesh, by what they are
// (docs/dump-format.md, "Placements"). A Parallelism describes its own layout
// (lib/step/parallelism.h); a single process has an empty mesh, and every placement list is empty.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "lib/trace/trace_record.h"

namespace magic {

struct TraceLayout {
  std::vector<MeshDim> mesh;
  std::vector<int64_t> coords;  // this rank's, one per mesh dimension

  // Activations [rows, columns, ...]; a zig-zag placement's length is filled in per sequence.
  std::vector<Placement> rows_and_columns;
  std::vector<Placement> loss;        // this rank's term of the step's loss
  std::vector<Placement> parameters;  // stored parameters and what is shaped like them
  // The gradient as backward leaves it, before the convention; nullopt where it is not a term of
  // the whole gradient any single process computes (AVG's sum of local means).
  std::optional<std::vector<Placement>> backward_gradient;
  std::vector<Placement> weight_gradient;  // REPLAY's dQ/dw from this rank's rows and columns

  // The placements of a [rows, columns, ...] activation of a `length`-position sequence.
  std::vector<Placement> activations(int64_t length) const;
  // Every rank holds the whole (a clip coefficient).
  std::vector<Placement> replicated() const;
};

}  // namespace magic
