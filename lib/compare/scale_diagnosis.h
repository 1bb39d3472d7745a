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
// larger where low-precision rounding tilts even a pure scaling). Several sizes of the same value
// are named as candidates ("x dp or x cp"): the scale alone cannot say which.
Diagnosis diagnose(const ComparisonStats& stats, bool passed, const std::vector<NamedFactor>& factors,
                   double direction_noise = 1e-6);

// An exact scale, D = s·R with s not 1: the ratio constant to 1% (residual <= 0.01, so cosine >=
// 1 - 5e-5) over at least 16 effective entries of R (one dominant entry makes any two vectors
// parallel), and s beyond 1 by more than 10% either way (the most a run's rounding could move a
// whole row by, through a scalar such as the clip coefficient). Rounding noise tilts D against R as
// much as it stretches it, so no correct run of the same policy shows one, in any dtype.
bool is_exact_scale(const ComparisonStats& stats);

// Names an exact scale: the sizes it equals to 1% ("x loss_scale (scale 16.000000)"), or "scale
// 16.000000, no topology factor".
Diagnosis diagnose_exact_scale(const ComparisonStats& stats, const std::vector<NamedFactor>& factors);

}  // namespace magic
