// Reassembly of a record's whole tensor from the ranks' pieces by its placements
// (docs/dump-format.md, "Placements"): innermost mesh dimension first, each group of pieces that
// agree on the other remaining coordinates combined as that dimension's placement says.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lib/trace/trace_record.h"

namespace magic {

struct Reassembled {
  at::Tensor whole;
  // "" or which replicas differ and by how much ("dp 1 differs from dp 0: max |diff| 2.5e-01").
  std::string replicas_differ;
  double replica_spread = 0.0;  // max |a - b| / max |a| over the replicas compared
};

// pieces[r] and coords[r] belong to rank r; the ranks cover the mesh once each (the manifest
// checks that). A rank the placements give no piece (Placement::on) has an undefined one. Throws InputError saying what
// does not tile: the caller adds file and record. Partial sums are added in fp64.
Reassembled reassemble(const std::vector<MeshDim>& mesh, const std::vector<std::vector<int64_t>>& coords,
                       const std::vector<at::Tensor>& pieces, const std::vector<Placement>& placements);

// For each rank, the part of the whole its piece covers, as a boolean mask of the whole's shape
// (all false for a rank that holds none); empty where a partial placement makes no piece cover a
// part of its own.
std::vector<at::Tensor> piece_covers(const std::vector<MeshDim>& mesh, const std::vector<std::vector<int64_t>>& coords,
                                     const std::vector<std::vector<int64_t>>& piece_shapes,
                                     const std::vector<Placement>& placements);

}  // namespace magic
