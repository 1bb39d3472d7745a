// TopologySpec: the layout string of magic-check --topology, "key=value[,key=value...]" with
// integers >= 1 (DESIGN.md section 4). Two families:
//   mesh:       dp (data-parallel replicas); cp and fsdp are reserved and rejected for now.
//   three-pool: n_ci, n_per_block (both required), n_blocks (default 2), n_ppgd (default 2);
//               world = n_ci + n_blocks * n_per_block + n_ppgd.
// Unknown keys, non-integers, zero, duplicates and mixed families: InputError listing the
// valid keys.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace magic::dist {

enum class TopologyFamily { kMesh, kThreePool };

struct TopologySpec {
  std::map<std::string, int64_t> values;  // as given
  std::string text;                       // the original string

  TopologyFamily family() const;
  int64_t get(const std::string& key, int64_t fallback) const;
  int64_t dp() const { return get("dp", 1); }
  int64_t n_ci() const { return get("n_ci", 1); }
  int64_t n_per_block() const { return get("n_per_block", 1); }
  int64_t n_blocks() const { return get("n_blocks", 2); }
  int64_t n_ppgd() const { return get("n_ppgd", 2); }
  int64_t world_size() const;
  // Canonical form with defaults spelled out: "dp=4", "n_ci=4,n_per_block=2,n_blocks=2,n_ppgd=2".
  std::string str() const;
  // The sizes a scale error can be a multiple of, by name, for the diagnosis ("dp", 4).
  std::vector<std::pair<std::string, int64_t>> named_sizes() const;

  static TopologySpec parse(const std::string& text);
};

// The keys parse() accepts.
const std::vector<std::string>& topology_keys();

}  // namespace magic::dist
