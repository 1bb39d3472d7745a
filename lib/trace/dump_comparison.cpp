#include "lib/trace/dump_comparison.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "lib/compare/scale_diagnosis.h"
#include "lib/core/strings.h"
#include "lib/trace/reassemble.h"

namespace magic {
namespace {

// "16..31" or "0..7, 24..31": the indices along `dim` that `cover` touches.
std::string index_ranges(const at::Tensor& cover, int64_t dim) {
  at::Tensor line = cover;
  for (int64_t d = cover.dim() - 1; d >= 0; --d) {
    if (d != dim) line = line.any(d);
  }
  line = line.contiguous();
  std::vector<std::string> ranges;
  const bool* on = line.data_ptr<bool>();
  for (int64_t i = 0; i < line.numel();) {
    if (!on[i]) {
      ++i;
      continue;
    }
    int64_t j = i;
    while (j + 1 < line.numel() && on[j + 1]) ++j;
    ranges.push_back(str_cat(i, "..", j));
    i = j + 1;
  }
  return join(ranges, ", ");
}

double tolerance_for(const DumpRecord& a, const DumpRecord& b, const CompareOptions& options) {
  if (options.tolerance) return *options.tolerance;
  if (!at::isFloatingType(a.dtype) && !at::isFloatingType(b.dtype)) return 0.0;  // ids and counts: exact
  return std::max(default_tolerance(a.dtype), default_tolerance(b.dtype));
}

std::vector<NamedFactor> factors_of(const LoadedDump& a, const LoadedDump& b) {
  std::vector<std::pair<std::string, int64_t>> sizes;
  std::set<std::string> names;
  for (const auto* dump : {&a, &b}) {
    for (const auto& [name, grid] : dump->manifest.placed_grids()) {
      for (const auto& d : grid.dims) {
        if (d.size > 1 && names.insert(d.name).second) sizes.emplace_back(d.name, d.size);
      }
    }
  }
  return candidate_factors(sizes);
}

// A record after the first divergence whose diagnosis names no factor: its statistics stay, and
// instead of blaming its own terms ("terms missing or extra, not a scaling") it says what it follows.
void mark_downstream(RecordRow& row, const RecordRow& first) {
  row.after_first_divergence = true;
  Diagnosis& d = row.row.diagnosis;
  if (!d.factors.empty()) return;  // a factor carried through is worth reading as it is
  const std::string follows = "after the first divergence (" + record_place(first.record) + ")";
  const std::string blame = ": terms missing or extra, not a scaling";
  const size_t at = d.text.find(blame);
  d.text = at == std::string::npos ? d.text + "; " + follows
                                   : d.text.substr(0, at) + ": " + follows + d.text.substr(at + blame.size());
}

// A replicated record whose replicas differ may be partial sums that a missing reduction left
// apart: summed along one replicated mesh dimension, they give the reference. That dimension's
// name ("tp"), or "".
std::string unreduced_over(const DumpTensor& candidate, const std::vector<MeshDim>& mesh,
                           const std::vector<std::vector<int64_t>>& coords, const at::Tensor& reference,
                           double tolerance) {
  const auto& placements = candidate.record.record.placements;
  for (size_t m = 0; m < mesh.size(); ++m) {
    const int64_t replicas = placements[m].on.empty() ? mesh[m].size : static_cast<int64_t>(placements[m].on.size());
    if (placements[m].type != Placement::Type::kReplicate || replicas < 2) continue;
    std::vector<Placement> summed = placements;
    summed[m] = Placement::partial(Placement::Reduce::kSum).held_on(placements[m].on);
    const at::Tensor whole = reassemble(mesh, coords, candidate.pieces, summed).whole.to(at::kDouble);
    if (whole.sizes().equals(reference.sizes()) && compare_tensors(whole, reference).worst_rel_err <= tolerance) {
      return mesh[m].name;
    }
  }
  return "";
}

// The diagnosis of a record whose replicas differ: the statistics' reading, the cause when the
// replicas are partial sums (instead of "terms missing or extra"), then which replicas differ.
std::string replicas_diagnosis(const std::string& text, const std::string& unreduced, const std::string& differ) {
  std::string out = text;
  if (!unreduced.empty()) {
    const std::string cause =
        str_cat("partial sums left unreduced over ", unreduced, " (summed over the ", unreduced, " ranks they match)");
    const std::string blame = ": terms missing or extra, not a scaling";
    const size_t at = out.find(blame);
    out = at != std::string::npos ? out.substr(0, at) + ": " + cause + out.substr(at + blame.size())
          : out.empty()           ? cause
                                  : out + "; " + cause;
  }
  return out.empty() ? differ : out + "; " + differ;
}

}  // namespace

std::string off_pieces(const DumpTensor& candidate, const std::vector<MeshDim>& mesh,
                       const std::vector<std::vector<int64_t>>& coords, const at::Tensor& reference, double tolerance) {
  const auto& placements = candidate.record.record.placements;
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& p : candidate.pieces) shapes.push_back(p.defined() ? p.sizes().vec() : std::vector<int64_t>{});
  const std::vector<at::Tensor> covers = piece_covers(mesh, coords, shapes, placements);
  if (covers.empty()) return "";
  const at::Tensor d = candidate.whole.to(at::kDouble), r = reference.to(at::kDouble);
  const double scale = std::max(r.numel() ? r.abs().max().item<double>() : 0.0, 1e-300);
  const at::Tensor error = (d - r).abs() / scale;
  std::vector<std::string> off;
  std::set<std::string> seen;
  for (size_t k = 0; k < covers.size(); ++k) {
    if (!covers[k].any().item<bool>()) continue;
    if (error.masked_select(covers[k]).max().item<double>() <= tolerance) continue;
    std::vector<std::string> who, ranges;
    for (size_t m = 0; m < mesh.size(); ++m) {
      const Placement& p = placements[m];
      if (p.type != Placement::Type::kShard && p.type != Placement::Type::kZigzag) continue;
      if (mesh[m].size > 1) who.push_back(str_cat(mesh[m].name, " rank ", coords[k][m]));
      const std::string span = index_ranges(covers[k], p.dim);
      const std::string range =
          (p.type == Placement::Type::kZigzag ? "positions " : str_cat("dim ", p.dim, " indices ")) + span;
      // Two mesh dimensions that shard one tensor dimension (fsdp within tp, within a replica) name it once.
      if (std::find(ranges.begin(), ranges.end(), range) == ranges.end()) ranges.push_back(range);
    }
    const std::string text = str_cat(join(who, ", "), " (", join(ranges, "; "), ")");
    if (!who.empty() && seen.insert(text).second) off.push_back(text);
  }
  // Replicas of one piece name it once; every piece off says nothing about where.
  std::set<std::vector<int64_t>> split_coords;
  for (const auto& c : coords) {
    if (!holds_piece(placements, c)) continue;
    std::vector<int64_t> key;
    for (size_t m = 0; m < mesh.size(); ++m) {
      const auto t = placements[m].type;
      if (t == Placement::Type::kShard || t == Placement::Type::kZigzag) key.push_back(c[m]);
    }
    split_coords.insert(key);
  }
  const size_t distinct_total = split_coords.size();
  if (off.empty() || off.size() >= distinct_total) return "";
  if (off.size() > 3) return str_cat("on ", off.size(), " of ", distinct_total, " pieces, first ", off.front());
  return "on " + join(off, " and ");
}

std::string DumpComparison::first_divergence_line() const {
  if (!first_divergence) return "";
  const RecordRow& r = rows[*first_divergence];
  std::string line = "first divergence: " + record_place(r.record);
  if (!r.where.empty()) line += " " + r.where;
  const Diagnosis& d = r.row.diagnosis;
  line += ", " + (d.factor.empty() ? d.text : (d.exact ? "" : "≈ ") + d.factor);
  line += *first_divergence == 0 ? "; it is the first record"
                                 : "; every earlier record agrees to " + format_sci(earlier_agreement, 0);
  return line;
}

DumpComparison compare_dumps(const LoadedDump& candidate, const LoadedDump& reference, const CompareOptions& options) {
  const std::vector<NamedFactor> factors =
      options.factor_sizes ? candidate_factors(*options.factor_sizes) : factors_of(candidate, reference);
  std::map<std::string, const DumpTensor*> by_identity;
  for (const auto& t : candidate.tensors) by_identity[record_identity(t.record.record)] = &t;
  const auto grids = candidate.manifest.placed_grids();
  std::set<std::string> matched;
  DumpComparison out;
  for (const auto& ref : reference.tensors) {
    const std::string id = record_identity(ref.record.record);
    RecordRow row{ref.record.record, {}, ""};
    const auto it = by_identity.find(id);
    const double tolerance =
        tolerance_for(ref.record, it == by_identity.end() ? ref.record : it->second->record, options);
    if (it == by_identity.end()) {
      if (options.common_only) continue;
      row.row = make_unmatched_row(ref.record.record.phase, ref.record.record.name, tolerance,
                                   str_cat("missing from ", candidate.path));
    } else {
      matched.insert(id);
      const DumpTensor& cand = *it->second;
      // The grid the candidate's pieces are placed on, and each rank's coordinates there.
      const PlacedGrid& grid = grids.at(cand.record.record.mesh);
      if (!cand.whole.sizes().equals(ref.whole.sizes())) {
        row.row =
            make_unmatched_row(ref.record.record.phase, ref.record.record.name, tolerance,
                               str_cat("shape ", cand.whole.sizes(), " but the reference's is ", ref.whole.sizes()));
      } else {
        row.row = make_check_row(ref.record.record.phase, ref.record.record.name, cand.whole.to(at::kDouble),
                                 ref.whole.to(at::kDouble), tolerance, factors);
        if (!row.row.passed) {
          row.where = off_pieces(cand, grid.dims, grid.coords, ref.whole, tolerance);
        }
        if (!cand.replicas_differ.empty() && cand.replica_spread > tolerance) {
          row.row.passed = false;
          const std::string unreduced =
              unreduced_over(cand, grid.dims, grid.coords, ref.whole.to(at::kDouble), tolerance);
          row.row.diagnosis.text = replicas_diagnosis(row.row.diagnosis.text, unreduced, cand.replicas_differ);
        }
      }
    }
    out.rows.push_back(std::move(row));
  }
  for (const auto& cand : candidate.tensors) {
    if (options.common_only || matched.count(record_identity(cand.record.record))) continue;
    RecordRow row{cand.record.record, {}, ""};
    row.row = make_unmatched_row(cand.record.record.phase, cand.record.record.name,
                                 tolerance_for(cand.record, cand.record, options),
                                 str_cat("not in the reference ", reference.path));
    out.rows.push_back(std::move(row));
  }
  for (size_t i = 0; i < out.rows.size(); ++i) {
    if (!out.rows[i].row.passed) {
      out.first_divergence = i;
      break;
    }
    out.earlier_agreement = std::max(out.earlier_agreement, out.rows[i].row.stats.worst_rel_err);
  }
  // Rows that could not be compared (missing, extra, another shape) keep what they say.
  for (size_t i = out.first_divergence.value_or(out.rows.size()) + 1; i < out.rows.size(); ++i) {
    RecordRow& row = out.rows[i];
    if (!row.row.passed && std::isfinite(row.row.stats.scale)) mark_downstream(row, out.rows[*out.first_divergence]);
  }
  return out;
}

}  // namespace magic
