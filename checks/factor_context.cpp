#include "checks/factor_context.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "checks/mutations.h"
#include "lib/core/strings.h"

namespace magic::checks {
namespace {

// The sizes above 1 that a scale can be named after, loss scale included.
std::vector<int64_t> sizes_above_one(const dist::TopologySpec& topology, const PrecisionPolicy& precision) {
  std::vector<int64_t> out;
  for (const auto& [name, value] : factor_sizes(topology, precision)) {
    if (value > 1) out.push_back(value);
  }
  return out;
}

bool all_distinct(std::vector<int64_t> sizes) {
  std::sort(sizes.begin(), sizes.end());
  return std::adjacent_find(sizes.begin(), sizes.end()) == sizes.end();
}

// A layout of `keys` with these values, if it parses (fsdp must divide dp).
std::optional<dist::TopologySpec> layout_of(const std::vector<std::string>& keys, const std::vector<int64_t>& values) {
  std::vector<std::string> items;
  for (size_t i = 0; i < keys.size(); ++i) items.push_back(str_cat(keys[i], "=", values[i]));
  try {
    return dist::TopologySpec::parse(join(items, ","));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// "dp = cp = 2": the sizes named by a row's candidate factors ("x dp", "1/cp", "x dp*cp").
std::string equal_sizes(const std::vector<std::string>& factors, const dist::TopologySpec& topology,
                        const PrecisionPolicy& precision) {
  std::vector<std::string> names;
  for (std::string f : factors) {
    f = f.rfind("x ", 0) == 0 ? f.substr(2) : f.rfind("1/", 0) == 0 ? f.substr(2) : f;
    if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
  }
  // The value of the first name: a single size, or a product of two.
  int64_t value = 1;
  for (const auto& part : split(names.front(), '*')) {
    for (const auto& [name, v] : factor_sizes(topology, precision)) {
      if (name == part) value *= v;
    }
  }
  return str_cat(join(names, " = "), " = ", value);
}

}  // namespace

dist::TopologySpec layout_with_distinct_sizes(const dist::TopologySpec& topology, const PrecisionPolicy& precision) {
  if (all_distinct(sizes_above_one(topology, precision))) return topology;
  const bool mesh = topology.family() == dist::TopologyFamily::kMesh;
  const std::vector<std::string> keys = mesh ? std::vector<std::string>{"dp", "cp", "fsdp"}
                                             : std::vector<std::string>{"n_ci", "n_per_block", "n_blocks", "n_ppgd"};
  std::vector<int64_t> from;
  for (const auto& k : keys) from.push_back(topology.get(k, mesh ? 1 : (k == "n_blocks" || k == "n_ppgd" ? 2 : 1)));
  // Each size from its own value up to 6 more; a size of 1 stays 1 (the layout keeps its axes).
  constexpr int64_t kReach = 6;
  std::optional<dist::TopologySpec> best;
  int64_t best_world = std::numeric_limits<int64_t>::max(), best_moves = 0;
  std::vector<int64_t> values(from.size());
  const std::function<void(size_t)> visit = [&](size_t i) {
    if (i == values.size()) {
      const auto spec = layout_of(keys, values);
      if (!spec || !all_distinct(sizes_above_one(*spec, precision))) return;
      int64_t moves = 0;
      for (size_t j = 0; j < values.size(); ++j) moves += values[j] - from[j];
      const int64_t world = spec->world_size();
      if (world < best_world || (world == best_world && moves < best_moves)) {
        best = spec;
        best_world = world;
        best_moves = moves;
      }
      return;
    }
    const int64_t top = from[i] == 1 ? 1 : from[i] + kReach;
    for (int64_t v = from[i]; v <= top; ++v) {
      values[i] = v;
      visit(i + 1);
    }
  };
  visit(0);
  return best ? *best : topology;
}

void add_factor_context(std::vector<CheckRow>& rows, const dist::TopologySpec& topology,
                        const PrecisionPolicy& precision) {
  for (auto& row : rows) {
    if (row.passed || row.diagnosis.factors.empty()) continue;
    std::string context;
    // The rest of the level: reduction rows judge the sum of each gradient's own terms, not the
    // gradient against the reference, so they do not say whether the reference's rows agree.
    // Only rows whose pass says something can vouch that the scale is not theirs too.
    int others = 0, others_silent = 0;
    for (const auto& other : rows) {
      if (&other == &row || other.level != row.level || other.reduction || !other.pass.empty()) continue;
      ++others;
      others_silent += !other.passed || !row_judged(other) || row_weakly_judged(other);
    }
    if (others > 0 && others_silent == 0) {
      context += str_cat("; on this tensor only (the other ", others, " ", row.level, " rows pass)");
    }
    if (row.diagnosis.factors.size() > 1) {
      const dist::TopologySpec distinct = layout_with_distinct_sizes(topology, precision);
      context += str_cat("; ", equal_sizes(row.diagnosis.factors, topology, precision),
                         " here, so this layout cannot tell them apart");
      if (distinct.str() != topology.str()) context += str_cat(" (one whose sizes differ can: ", distinct.str(), ")");
    }
    row.diagnosis.text += context;
  }
}

}  // namespace magic::checks
