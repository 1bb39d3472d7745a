// The mutation catalog (DESIGN.md section 6): each mutation plants one known bug in the
// distributed pipeline and states its signature, the first level that must fail (in the order
// grad, query_grad, hvp, final_params, scores) and the factor the diagnosis must name there
// ("" where the error is not a scaling).
#pragma once

#include <string>
#include <vector>

#include "lib/compare/check_row.h"
#include "lib/dist/planted_bug.h"
#include "lib/dist/topology.h"
#include "lib/io/report.h"

namespace magic::checks {

struct Mutation {
  std::string name;
  dist::PlantedBug bug;
  std::string description;
  std::string expected_level;
  std::string expected_factor;
  dist::TopologyFamily family;
  std::string needs;  // the pool that must hold more than one rank ("dp", "n_ci", ...)
};

const std::vector<Mutation>& mutation_catalog();
// The mutations that can show on this topology: its family, and more than one rank in `needs`.
std::vector<Mutation> mutations_for(const dist::TopologySpec& topology);
// InputError listing the catalog when `name` is unknown or does not apply.
const Mutation& find_mutation(const std::string& name, const dist::TopologySpec& topology);

// Caught when the first failing level is the expected one and, if a factor is expected, a
// failing row at that level names it (exactly or as ≈). The observed level is the first that
// failed ("" if none); the observed factor and diagnosis are those at the expected level.
BiteOutcome judge_mutation(const Mutation& mutation, const std::vector<CheckRow>& rows);

}  // namespace magic::checks
