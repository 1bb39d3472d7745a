#include "checks/mutations.h"

#include "checks/check_settings.h"
#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic::checks {

const std::vector<Mutation>& mutation_catalog() {
  using dist::PlantedBug;
  constexpr auto kMesh = dist::TopologyFamily::kMesh;
  constexpr auto kThreePool = dist::TopologyFamily::kThreePool;
  static const std::vector<Mutation> catalog{
      {"avg-on-uneven-shards", PlantedBug::kAvgReduce,
       "local mean and AVG reduction on shards of unequal size (the AVG convention's blind spot)", "grad", "", kMesh,
       "dp"},
      {"local-normalizer", PlantedBug::kLocalNormalizer,
       "SUM reduction of losses normalized by each rank's own count instead of the global one", "grad", "x dp", kMesh,
       "dp"},
      {"missing-reduce", PlantedBug::kMissingReduce, "the gradient is never reduced across data-parallel ranks", "grad",
       "", kMesh, "dp"},
      {"replicated-allreduce-backward", PlantedBug::kReplicatedAllReduceBackward,
       "the replicated gradient comes out of all_reduce_sum, whose backward sums the cotangent once per rank", "hvp",
       "x dp", kMesh, "dp"},
      {"detached-collective", PlantedBug::kDetachedCollective,
       "the gradient is summed outside autograd (DDP-hook style): second-order cross-rank terms are lost", "hvp", "",
       kMesh, "dp"},
      {"extra-divide-scores", PlantedBug::kExtraDivideScores, "the assembled scores are divided by dp once more",
       "scores", "1/dp", kMesh, "dp"},
      {"avg-ci-reduce", PlantedBug::kAvgCiReduce, "the CI pool averages its gradient reduction instead of summing",
       "grad", "1/n_ci", kThreePool, "n_ci"},
      {"prescale-ci", PlantedBug::kPrescaleCi,
       "the gates' consumers pre-scale their cotangent by n_ci, for an AVG the CI pool does not do", "grad", "x n_ci",
       kThreePool, "n_ci"},
      {"faith-on-all-ranks", PlantedBug::kFaithOnAllRanks,
       "every block rank adds the replicated faithfulness term, not only the block leader", "grad", "x n_per_block",
       kThreePool, "n_per_block"},
      {"avg-block-reduce", PlantedBug::kAvgBlockReduce, "each block averages its gradient reduction instead of summing",
       "grad", "1/n_per_block", kThreePool, "n_per_block"},
      {"global-sum-allreduce-backward", PlantedBug::kGlobalSumAllReduceBackward,
       "every CI rank adds the importance term of the all-reduced global sum: its backward counts it n_ci times",
       "grad", "x n_ci", kThreePool, "n_ci"},
      {"detached-global-residual", PlantedBug::kDetachedGlobalResidual,
       "the importance term's global sum as local + detached residual: exact first derivatives, second-order "
       "cross-rank terms lost",
       "hvp", "", kThreePool, "n_ci"},
      {"ppgd-broadcast-all-ranks", PlantedBug::kPpgdBroadcastAllRanks,
       "each PPGD rank returns the pool's summed V/U cotangent instead of its own", "grad", "x n_ppgd", kThreePool,
       "n_ppgd"},
  };
  return catalog;
}

std::vector<Mutation> mutations_for(const dist::TopologySpec& topology) {
  std::vector<Mutation> out;
  for (const auto& m : mutation_catalog()) {
    if (m.family != topology.family()) continue;
    const int64_t size = m.needs == "dp"            ? topology.dp()
                         : m.needs == "n_ci"        ? topology.n_ci()
                         : m.needs == "n_per_block" ? topology.n_per_block()
                                                    : topology.n_ppgd();
    if (size > 1) out.push_back(m);
  }
  return out;
}

const Mutation& find_mutation(const std::string& name, const dist::TopologySpec& topology) {
  std::vector<std::string> names;
  for (const auto& m : mutation_catalog()) names.push_back(m.name);
  for (const auto& m : mutation_catalog()) {
    if (m.name != name) continue;
    for (const auto& applicable : mutations_for(topology)) {
      if (applicable.name == name) return m;
    }
    throw InputError(str_cat("--mutate ", name, ": does not apply to ", topology.str(), "; it needs a ",
                             m.family == dist::TopologyFamily::kMesh ? "mesh" : "three-pool", " layout with ", m.needs,
                             " >= 2"));
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
  // The row to show: one naming the expected factor (exactly, if any row does), else the first
  // failing row at the expected level.
  const CheckRow* shown = nullptr;
  int shown_quality = -1;  // 2 exact match, 1 approximate match, 0 any failure
  for (const auto& row : rows) {
    if (row.passed || row.level != mutation.expected_level) continue;
    const auto& names = row.diagnosis.factors;
    const bool named = !mutation.expected_factor.empty() &&
                       std::find(names.begin(), names.end(), mutation.expected_factor) != names.end();
    const int quality = named ? (row.diagnosis.exact ? 2 : 1) : 0;
    if (quality > shown_quality) {
      shown = &row;
      shown_quality = quality;
    }
  }
  if (shown != nullptr) {
    v.observed_diagnosis = shown->tensor + ": " + shown->diagnosis.text;
    v.observed_factor = shown_quality > 0 ? mutation.expected_factor : shown->diagnosis.factor;
  }
  const bool factor_seen = mutation.expected_factor.empty() || shown_quality > 0;
  v.caught = v.observed_level == mutation.expected_level && factor_seen;
  return v;
}

}  // namespace magic::checks
