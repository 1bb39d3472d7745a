#include "lib/trace/reassemble.h"

#include <map>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {
namespace {

std::string shape_text(const at::Tensor& t) {
  return str_cat(t.sizes());
}

// Pieces along one mesh dimension at coordinates `at` (ascending), combined as `p` says. `masks`:
// the pieces are boolean covers, replicas are or-ed and a partial sum has none (undefined).
at::Tensor combine(const Placement& p, const std::vector<at::Tensor>& parts, const std::vector<int64_t>& at,
                   const MeshDim& dim, bool masks, Reassembled& out) {
  const at::Tensor& first = parts.front();
  auto same_shapes = [&](const char* what) {
    for (size_t i = 1; i < parts.size(); ++i) {
      if (!parts[i].sizes().equals(first.sizes())) {
        throw InputError(str_cat(what, " along ", dim.name, " have shapes ", shape_text(first), " (", dim.name, " ",
                                 at[0], ") and ", shape_text(parts[i]), " (", dim.name, " ", at[i], ")"));
      }
    }
  };
  auto require_dim = [&](int64_t k) {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (k >= parts[i].dim()) {
        throw InputError(str_cat(placement_text(p), " along ", dim.name, " but ", dim.name, " ", at[i],
                                 "'s piece has shape ", shape_text(parts[i])));
      }
      for (int64_t d = 0; d < first.dim(); ++d) {
        if (d != k && (parts[i].dim() != first.dim() || parts[i].size(d) != first.size(d))) {
          throw InputError(str_cat(placement_text(p), " along ", dim.name, ": pieces of shapes ", shape_text(first),
                                   " (", dim.name, " ", at[0], ") and ", shape_text(parts[i]), " (", dim.name, " ",
                                   at[i], ") differ outside dimension ", k));
        }
      }
    }
  };
  switch (p.type) {
    case Placement::Type::kReplicate: {
      same_shapes("replicas");
      if (masks) {
        at::Tensor any = first.clone();
        for (size_t i = 1; i < parts.size(); ++i) any.logical_or_(parts[i]);
        return any;
      }
      const at::Tensor base = first.to(at::kDouble);
      const double largest = base.numel() ? base.abs().max().item<double>() : 0.0;
      const double scale = std::max(largest, 1e-300);
      for (size_t i = 1; i < parts.size(); ++i) {
        const double diff = base.numel() ? (parts[i].to(at::kDouble) - base).abs().max().item<double>() : 0.0;
        if (diff > 0 && diff / scale > out.replica_spread) {
          out.replica_spread = diff / scale;
          // A zero first replica has no scale to read a difference against: say so.
          if (largest == 0) {
            out.replicas_differ = str_cat("replicas differ: ", dim.name, " ", at[0], " is zero, ", dim.name, " ", at[i],
                                          " is not (max |", dim.name, " ", at[i], "| = ", format_sci(diff, 1), ")");
            continue;
          }
          out.replicas_differ =
              str_cat("replicas differ: ", dim.name, " ", at[i], " differs from ", dim.name, " ", at[0],
                      " by max |diff| / max |", dim.name, " ", at[0], "| = ", format_sci(diff / scale, 1));
        }
      }
      return first;
    }
    case Placement::Type::kShard: {
      require_dim(p.dim);
      at::Tensor whole;
      if (p.parts == 1) {
        whole = at::cat(parts, p.dim);
      } else {
        // Each piece holds its shard of every part, in part order: part j is the j-th slices put side by side.
        std::vector<at::Tensor> slices;
        for (int64_t j = 0; j < p.parts; ++j) {
          for (size_t i = 0; i < parts.size(); ++i) {
            const int64_t size = parts[i].size(p.dim);
            if (size % p.parts != 0) {
              throw InputError(str_cat(placement_text(p), " along ", dim.name, ": ", dim.name, " ", at[i],
                                       "'s piece has shape ", shape_text(parts[i]), ", whose dimension ", p.dim,
                                       " does not split into ", p.parts, " equal parts"));
            }
            slices.push_back(parts[i].narrow(p.dim, j * (size / p.parts), size / p.parts));
          }
        }
        whole = at::cat(slices, p.dim);
      }
      if (p.length == 0) return whole;
      if (p.length > whole.size(p.dim)) {
        throw InputError(str_cat(placement_text(p), " along ", dim.name, ": the pieces make ", whole.size(p.dim),
                                 " entries, fewer than the length"));
      }
      return whole.narrow(p.dim, 0, p.length);
    }
    case Placement::Type::kZigzag: {
      require_dim(p.dim);
      const int64_t local = first.size(p.dim);
      for (size_t i = 0; i < parts.size(); ++i) {
        if (parts[i].size(p.dim) != local || local % 2 != 0) {
          throw InputError(str_cat("zigzag(", p.dim, ") along ", dim.name,
                                   " needs pieces of one even size in dimension ", p.dim, ", got ", shape_text(first),
                                   " (", dim.name, " ", at[0], ") and ", shape_text(parts[i]), " (", dim.name, " ",
                                   at[i], ")"));
        }
      }
      // Coordinate i holds chunks i and 2n-1-i: the first halves in order, then the second halves reversed.
      std::vector<at::Tensor> chunks(2 * parts.size());
      for (size_t i = 0; i < parts.size(); ++i) {
        chunks[i] = parts[i].narrow(p.dim, 0, local / 2);
        chunks[2 * parts.size() - 1 - i] = parts[i].narrow(p.dim, local / 2, local / 2);
      }
      at::Tensor sequence = at::cat(chunks, p.dim);
      if (p.length == 0) return sequence;
      if (p.length > sequence.size(p.dim)) {
        throw InputError(str_cat(placement_text(p), " along ", dim.name, ": the chunk pairs make ",
                                 sequence.size(p.dim), " positions, fewer than the length"));
      }
      return sequence.narrow(p.dim, 0, p.length);
    }
    case Placement::Type::kPartial: {
      same_shapes("partial sums");
      if (masks) return at::Tensor();
      at::Tensor sum = at::zeros(first.sizes(), first.options().dtype(at::kDouble));
      for (const auto& part : parts) sum.add_(part.to(at::kDouble));
      if (p.reduce == Placement::Reduce::kAvg) sum.div_(static_cast<double>(parts.size()));
      return at::isFloatingType(first.scalar_type()) ? sum : sum.to(first.scalar_type());
    }
  }
  return first;
}

// The coordinates along mesh dimension `m` that hold a piece of a record placed as `p`.
std::vector<int64_t> holders(const Placement& p, const MeshDim& dim) {
  if (p.on.empty()) {
    std::vector<int64_t> all(static_cast<size_t>(dim.size));
    for (int64_t c = 0; c < dim.size; ++c) all[static_cast<size_t>(c)] = c;
    return all;
  }
  for (size_t i = 0; i < p.on.size(); ++i) {
    if (p.on[i] < 0 || p.on[i] >= dim.size || (i > 0 && p.on[i] <= p.on[i - 1])) {
      throw InputError(
          str_cat(placement_text(p), " along ", dim.name, ": expected ascending coordinates 0 to ", dim.size - 1));
    }
  }
  return p.on;
}

std::string coords_text(const std::vector<MeshDim>& mesh, const std::vector<int64_t>& c) {
  std::vector<std::string> parts;
  for (size_t m = 0; m < mesh.size(); ++m) parts.push_back(str_cat(mesh[m].name, " ", c[m]));
  return join(parts, ", ");
}

at::Tensor reduce_mesh(const std::vector<MeshDim>& mesh, const std::vector<std::vector<int64_t>>& coords,
                       const std::vector<at::Tensor>& all_pieces, const std::vector<Placement>& placements, bool masks,
                       Reassembled& out) {
  if (placements.size() != mesh.size()) {
    throw InputError(str_cat(placements.size(), " placements for a ", mesh.size(), "-dimensional mesh"));
  }
  std::vector<std::vector<int64_t>> along;
  for (size_t m = 0; m < mesh.size(); ++m) along.push_back(holders(placements[m], mesh[m]));
  // Only the ranks the placements name hold a piece; one that holds another is a writer's slip.
  std::vector<at::Tensor> pieces;
  std::vector<std::vector<int64_t>> keys;
  for (size_t i = 0; i < all_pieces.size(); ++i) {
    if (holds_piece(placements, coords[i])) {
      pieces.push_back(all_pieces[i]);
      keys.push_back(coords[i]);
    } else if (all_pieces[i].defined() && !masks) {
      throw InputError(str_cat("a piece at ", coords_text(mesh, coords[i]), ", which the placements give none"));
    }
  }
  for (int64_t m = static_cast<int64_t>(mesh.size()) - 1; m >= 0; --m) {
    std::map<std::vector<int64_t>, std::vector<at::Tensor>> groups;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::vector<int64_t> prefix(keys[i].begin(), keys[i].begin() + m);
      auto& slot = groups[prefix];
      slot.resize(mesh[m].size);
      slot[keys[i][m]] = pieces[i];
    }
    std::vector<at::Tensor> next;
    std::vector<std::vector<int64_t>> next_keys;
    for (auto& [prefix, slot] : groups) {
      std::vector<at::Tensor> parts;
      for (const int64_t c : along[m]) {
        if (!slot[c].defined()) {
          if (masks) return at::Tensor();  // a partial sum below made the covers meaningless
          throw InputError(str_cat("no piece at ", mesh[m].name, " ", c));
        }
        parts.push_back(slot[c]);
      }
      next.push_back(combine(placements[m], parts, along[m], mesh[m], masks, out));
      next_keys.push_back(prefix);
    }
    pieces = std::move(next);
    keys = std::move(next_keys);
  }
  if (pieces.empty()) throw InputError("no rank holds a piece");
  return pieces.front();
}

}  // namespace

Reassembled reassemble(const std::vector<MeshDim>& mesh, const std::vector<std::vector<int64_t>>& coords,
                       const std::vector<at::Tensor>& pieces, const std::vector<Placement>& placements) {
  Reassembled out;
  out.whole = reduce_mesh(mesh, coords, pieces, placements, false, out);
  return out;
}

std::vector<at::Tensor> piece_covers(const std::vector<MeshDim>& mesh, const std::vector<std::vector<int64_t>>& coords,
                                     const std::vector<std::vector<int64_t>>& piece_shapes,
                                     const std::vector<Placement>& placements) {
  std::vector<at::Tensor> covers(piece_shapes.size());
  at::Tensor none;  // what a rank that holds no piece covers
  for (size_t r = 0; r < piece_shapes.size(); ++r) {
    if (!holds_piece(placements, coords[r])) continue;
    std::vector<at::Tensor> masks;
    for (size_t i = 0; i < piece_shapes.size(); ++i) masks.push_back(at::full(piece_shapes[i], i == r, at::kBool));
    Reassembled ignored;
    covers[r] = reduce_mesh(mesh, coords, masks, placements, true, ignored);
    if (!covers[r].defined()) return {};
    none = at::zeros_like(covers[r]);
  }
  if (!none.defined()) return {};
  for (auto& c : covers) {
    if (!c.defined()) c = none;
  }
  return covers;
}

}  // namespace magic
