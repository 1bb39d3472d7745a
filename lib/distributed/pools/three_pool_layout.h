// The three-pool layout (docs/magic-check.md, "Three pools"): world ranks in order
//   [0, n_ci)                                   CI pool: the causal-importance parameters θ_ci,
//                                               data-parallel over the batch
//   n_ci + k n_per_block + [0, n_per_block)     block k: the V/U of its sites, replicated and
//                                               data-parallel within the block
//   the last n_ppgd ranks                       PPGD pool: a V/U replica (received each step) and
//                                               the persistent adversarial sources, data-parallel
// Sites are split over blocks in contiguous runs (sizes differ by at most one). Batch contract:
// the global batch divides evenly into every pool's shards, and the shard sizes of pools that
// exchange activations (CI and each block, CI and PPGD) divide each other, so that every shard
// of one pool is a union of whole shards of the other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/distributed/runtime/topology.h"

namespace magic::dist {

enum class PoolRole { kCi, kBlock, kPpgd };
std::string role_name(PoolRole role);

class ThreePoolLayout {
 public:
  // `n_sites`: the decomposed layers of the workload (>= n_blocks). Throws InputError.
  ThreePoolLayout(const TopologySpec& topology, int64_t n_sites);

  int64_t world_size() const { return world_; }
  int64_t n_ci() const { return n_ci_; }
  int64_t n_per_block() const { return n_per_block_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t n_ppgd() const { return n_ppgd_; }

  PoolRole role(int rank) const;
  int64_t block_of(int rank) const;       // kBlock only
  int64_t index_in_pool(int rank) const;  // position within its pool (block)
  std::vector<int> ci_ranks() const;
  std::vector<int> block_ranks(int64_t block) const;
  std::vector<int> ppgd_ranks() const;
  int block_leader(int64_t block) const { return block_ranks(block).front(); }
  std::vector<int64_t> sites_of_block(int64_t block) const;
  int64_t block_of_site(int64_t site) const;

  // Throws InputError naming the violated constraint (`what` names the batch: "--batch 12").
  void check_batch(int64_t batch, const std::string& what) const;

 private:
  int64_t n_ci_, n_per_block_, n_blocks_, n_ppgd_, world_, n_sites_;
};

}  // namespace magic::dist
