// TopologySpec: the layout string of magic-check --topology, "key=value[,key=value...]" with
// integers >= 1. Mesh family: dp (data-parallel replicas); cp and fsdp are reserved and rejected
// until they are implemented. Unknown keys, non-integers, zero, duplicates: InputError listing
// the valid keys.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace magic::dist {

struct TopologySpec {
  std::map<std::string, int64_t> values;  // as given
  std::string text;                       // the original string

  int64_t get(const std::string& key, int64_t fallback) const;
  int64_t dp() const { return get("dp", 1); }
  int64_t world_size() const;
  // "dp=4": the canonical form.
  std::string str() const;
  // The sizes a scale error can be a multiple of, by name, for the diagnosis ("dp", 4).
  std::vector<std::pair<std::string, int64_t>> named_sizes() const;

  static TopologySpec parse(const std::string& text);
};

// The keys parse() accepts, and the reserved ones it names in its refusal.
const std::vector<std::string>& topology_keys();

}  // namespace magic::dist
