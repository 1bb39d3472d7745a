#include "checks/mutations.h"

#include "checks/check_settings.h"
#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic::checks {

const std::vector<Mutation>& mutation_catalog() {
  using dist::PlantedBug;
  static const std::vector<Mutation> catalog{
      {"avg-on-uneven-shards", PlantedBug::kAvgReduce,
       "local mean and AVG reduction on shards of unequal size (the AVG convention's blind spot)", "grad", ""},
      {"local-normalizer", PlantedBug::kLocalNormalizer,
       "SUM reduction of losses normalized by each rank's own count instead of the global one", "grad", "x dp"},
      {"missing-reduce", PlantedBug::kMissingReduce, "the gradient is never reduced across data-parallel ranks",
       "grad", ""},
      {"replicated-allreduce-backward", PlantedBug::kReplicatedAllReduceBackward,
       "the replicated gradient comes out of all_reduce_sum, whose backward sums the cotangent once per rank",
       "hvp", "x dp"},
      {"detached-collective", PlantedBug::kDetachedCollective,
       "the gradient is summed outside autograd (DDP-hook style): second-order cross-rank terms are lost", "hvp",
       ""},
      {"extra-divide-scores", PlantedBug::kExtraDivideScores, "the assembled scores are divided by dp once more",
       "scores", "1/dp"},
  };
  return catalog;
}

std::vector<Mutation> mutations_for(const dist::TopologySpec& topology) {
  if (topology.dp() < 2) return {};
  return mutation_catalog();
}

const Mutation& find_mutation(const std::string& name, const dist::TopologySpec& topology) {
  std::vector<std::string> names;
  for (const auto& m : mutation_catalog()) names.push_back(m.name);
  for (const auto& m : mutation_catalog()) {
    if (m.name != name) continue;
    if (mutations_for(topology).empty()) {
      throw InputError(str_cat("--mutate ", name, ": needs a topology with more than one data-parallel rank, got ",
                               topology.str()));
    }
    return m;
  }
  throw InputError(str_cat("--mutate: unknown mutation '", name, "'; expected one of ", join(names, ", ")));
}

BiteOutcome judge_mutation(const Mutation& mutation, const std::vector<CheckRow>& rows) {
  BiteOutcome v;
  v.mutation = mutation.name;
  v.description = mutation.description;
  v.expected_level = mutation.expected_level;
  v.expected_factor = mutation.expected_factor;
  int first = level_rank("");
  for (const auto& row : rows) {
    if (!row.passed) first = std::min(first, level_rank(row.level));
  }
  const auto& levels = all_levels();
  v.observed_level = first < static_cast<int>(levels.size()) ? level_name(levels[first]) : "";
  bool factor_seen = mutation.expected_factor.empty();
  for (const auto& row : rows) {
    if (row.passed || row.level != mutation.expected_level) continue;
    if (v.observed_diagnosis.empty()) v.observed_diagnosis = row.diagnosis.text;
    if (!row.diagnosis.factor.empty() && v.observed_factor.empty()) v.observed_factor = row.diagnosis.factor;
    if (!mutation.expected_factor.empty() && row.diagnosis.factor == mutation.expected_factor) {
      factor_seen = true;
      v.observed_factor = row.diagnosis.factor;
      v.observed_diagnosis = row.diagnosis.text;
    }
  }
  v.caught = v.observed_level == mutation.expected_level && factor_seen;
  return v;
}

}  // namespace magic::checks
