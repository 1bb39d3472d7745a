// Two dumps compared record by record (magic-compare): the candidate (a distributed run, a
// team's own code) against the reference (a single process), each reassembled to whole tensors,
// with magic-check's comparison (lib/compare): tolerance by dtype, the scale factor named from
// the meshes' sizes, direction, and records missing from one side or of another shape. The first
// failing record in the run's order is the first divergence: where the difference began.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lib/compare/check_row.h"
#include "lib/trace/dump_reader.h"

namespace magic {

struct RecordRow {
  TraceRecord record;  // the reference's (the candidate's for a record only it has)
  CheckRow row;        // level: the phase; tensor: the record's name
  // For a failing record whose candidate pieces are shards: the ranks whose pieces are off,
  // "on cp rank 1 (positions 16..31)"; "" when every piece is, or the pieces are partial sums.
  std::string where;
  // A failing record after the first divergence: it may be off only because that one is, so a
  // diagnosis that would blame its own terms says it follows the first divergence instead.
  bool after_first_divergence = false;
};

struct DumpComparison {
  std::vector<RecordRow> rows;  // the reference's order, then records only the candidate has
  std::optional<size_t> first_divergence;
  // The largest worst relative error of the records before the first divergence (of all
  // records when nothing diverged).
  double earlier_agreement = 0.0;

  bool passed() const { return !rows.empty() && !first_divergence; }
  // "first divergence: step 0, backward, blocks.1.attn.qkv.weight gradient on cp rank 1
  // (positions 16..31), ≈ x cp; every earlier record agrees to 4e-16", or "" when none.
  std::string first_divergence_line() const;
};

struct CompareOptions {
  std::optional<double> tolerance;  // instead of the dtype's (comparison.h)
  // The sizes a factor is named from, instead of the meshes' (magic-check names its topology's).
  std::optional<std::vector<std::pair<std::string, int64_t>>> factor_sizes;
  // Leave out records only one side made instead of failing them.
  bool common_only = false;
};

DumpComparison compare_dumps(const LoadedDump& candidate, const LoadedDump& reference, const CompareOptions& options);

// The ranks whose pieces of `candidate_whole` are off `reference` beyond `tolerance` (relative
// to max |reference|), named by their coordinates on the mesh dimensions that split the record.
std::string off_pieces(const DumpTensor& candidate, const std::vector<MeshDim>& mesh,
                       const std::vector<std::vector<int64_t>>& coords, const at::Tensor& reference, double tolerance);

}  // namespace magic
