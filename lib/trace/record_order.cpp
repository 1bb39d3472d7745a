#include "lib/trace/record_order.h"

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>

#include "lib/core/strings.h"

namespace magic {
namespace {

std::string placements_text(const std::vector<Placement>& placements) {
  std::vector<std::string> parts;
  for (const auto& p : placements) parts.push_back(placement_text(p));
  return "[" + join(parts, ", ") + "]";
}

}  // namespace

std::vector<TraceRecord> merged_records(const std::vector<std::vector<TraceRecord>>& by_rank) {
  // Each record once: where it was first seen (rank, position), what it is, and its edges.
  struct Node {
    std::pair<size_t, size_t> first;
    TraceRecord record;
    std::set<size_t> next;
    size_t waiting = 0;
  };
  std::vector<Node> nodes;
  std::map<std::string, size_t> index_of;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    size_t previous = SIZE_MAX;
    for (size_t i = 0; i < by_rank[r].size(); ++i) {
      const TraceRecord& record = by_rank[r][i];
      const auto [it, added] = index_of.emplace(record_identity(record), nodes.size());
      if (added) {
        nodes.push_back({{r, i}, record, {}, 0});
      } else {
        const TraceRecord& seen = nodes[it->second].record;
        const std::string a = placements_text(seen.placements), b = placements_text(record.placements);
        if (a != b || seen.mesh != record.mesh || seen.layer != record.layer) {
          throw std::invalid_argument(str_cat("rank ", nodes[it->second].first.first, " and rank ", r, " place ",
                                              record_place(record), " differently (", a, " on \"", seen.mesh, "\", ", b,
                                              " on \"", record.mesh, "\")"));
        }
      }
      const size_t node = it->second;
      if (previous != SIZE_MAX && nodes[previous].next.insert(node).second) ++nodes[node].waiting;
      previous = node;
    }
  }
  // Kahn's order, the earliest first seen among the ready.
  std::set<std::pair<std::pair<size_t, size_t>, size_t>> ready;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].waiting == 0) ready.insert({nodes[n].first, n});
  }
  std::vector<TraceRecord> out;
  while (!ready.empty()) {
    const size_t n = ready.begin()->second;
    ready.erase(ready.begin());
    out.push_back(nodes[n].record);
    for (const size_t m : nodes[n].next) {
      if (--nodes[m].waiting == 0) ready.insert({nodes[m].first, m});
    }
  }
  if (out.size() != nodes.size()) {
    for (const auto& node : nodes) {
      if (node.waiting > 0) {
        throw std::invalid_argument(str_cat("the ranks made their common records in contradicting orders (",
                                            record_place(node.record), " among them)"));
      }
    }
  }
  return out;
}

}  // namespace magic
