// How one rank's traced tensors make up the whole across the ranks' mesh, by what they are
// (docs/dump-format.md, "Placements"). A Parallelism describes its own layout
// (lib/step/parallelism.h); a single process has an empty mesh, and every placement list is empty.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/trace/trace_record.h"

namespace magic {

// A further grid over the same ranks (docs/dump-format.md, "Named meshes"): the parameters whose
// names start with `prefix` are placed on it rather than on the main mesh (a bridge's encoder).
struct TraceGrid {
  std::vector<MeshDim> mesh;
  std::vector<int64_t> coords;  // this rank's
  std::string prefix;
  std::vector<Placement> parameters;
  std::map<std::string, std::vector<Placement>> parameters_by_name;
};

struct TraceLayout {
  std::vector<MeshDim> mesh;
  std::vector<int64_t> coords;             // this rank's, one per mesh dimension
  std::map<std::string, TraceGrid> grids;  // by name; empty but for a bridge

  // Activations [rows, columns, ...]; a zig-zag placement's length is filled in per sequence.
  std::vector<Placement> rows_and_columns;
  // The residual stream between blocks [rows, columns, d_model]: under sequence parallelism each tp
  // rank holds a contiguous shard of its columns; empty: placed as the other activations.
  std::vector<Placement> residual_stream;
  // Logits [rows, columns, vocabulary], where tensor parallelism splits the vocabulary; empty:
  // placed as the other activations.
  std::vector<Placement> rows_columns_and_vocabulary;
  std::vector<Placement> loss;  // this rank's term of the step's loss
  // Stored parameters and what is shaped like them (gradients, updates, cotangents, HVPs), unless
  // `parameters_by_name` places the parameter otherwise (a tensor-parallel piece).
  std::vector<Placement> parameters;
  std::map<std::string, std::vector<Placement>> parameters_by_name;
  // Whether the gradient as backward leaves it, before the convention, is placed as the parameters
  // are; false where it is not a term of the whole gradient any single process computes (AVG's sum
  // of local means): it is then not recorded.
  bool backward_gradient_is_whole = true;
  std::vector<Placement> weight_gradient;  // REPLAY's dQ/dw from this rank's rows and columns

  // The placements of a [rows, columns, ...] activation of a `length`-position sequence.
  std::vector<Placement> activations(int64_t length) const;
  // The placements of a block's output (the residual stream) of a `length`-position sequence.
  std::vector<Placement> residual(int64_t length) const;
  // The placements of logits of a `length`-position sequence.
  std::vector<Placement> logits(int64_t length) const;
  // The placements of parameter `name` and of everything shaped like it, on parameter_grid(name).
  const std::vector<Placement>& parameter(const std::string& name) const;
  // The grid parameter `name` is placed on: "" the main mesh, or a name in `grids`.
  std::string parameter_grid(const std::string& name) const;
  // Every rank holds the whole (a clip coefficient).
  std::vector<Placement> replicated() const;
};

}  // namespace magic
