// Scale diagnosis: when a distributed tensor points the right way but has the wrong length,
// name the topology factor that explains it ("x dp", "1/n_ci", "x dp*cp").
//   exact:        cosine >= 1 - 1e-6 and |scale / f - 1| <= 1e-3      -> "x dp"
//   approximate:  cosine >= 0.9      and |scale / f - 1| <= 0.25      -> "≈ x dp", the nearest such f
// (approximate matches arise when a wrong normalizer meets shards of unequal size).
// Otherwise the diagnosis describes what is off: a zero tensor, a scale that is no topology
// factor, or a direction that differs (terms missing, not a scaling).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "lib/compare/comparison.h"

namespace magic {

struct NamedFactor {
  std::string name;  // "x dp", "1/dp", "x dp*cp"
  double value;
};

// Candidate factors from the topology's named sizes (each > 1), in preference order: single
// factors as given, their inverses, then products and inverse products of two.
std::vector<NamedFactor> candidate_factors(const std::vector<std::pair<std::string, int64_t>>& sizes);

struct Diagnosis {
  std::string text;                  // empty when the comparison passed
  std::string factor;                // the preferred factor explaining the scale ("x dp"), or empty
  std::vector<std::string> factors;  // every factor of that value ("x n_per_block", "x n_ppgd")
  bool exact = false;                // an exact match (not ≈)
  double scale_tolerance = 0.0;      // |scale / factor - 1| the match allowed
};

// `direction_noise`: the exact match needs cosine >= 1 - direction_noise (1e-6 at fp64 and fp32;
// larger where low-precision rounding tilts even a pure scaling).
Diagnosis diagnose(const ComparisonStats& stats, bool passed, const std::vector<NamedFactor>& factors,
                   double direction_noise = 1e-6);

}  // namespace magic
