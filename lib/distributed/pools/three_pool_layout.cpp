#include "lib/distributed/pools/three_pool_layout.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/data_parallel.h"

namespace magic::dist {

std::string role_name(PoolRole role) {
  switch (role) {
    case PoolRole::kCi:
      return "ci";
    case PoolRole::kBlock:
      return "block";
    case PoolRole::kPpgd:
      return "ppgd";
  }
  return "?";
}

ThreePoolLayout::ThreePoolLayout(const TopologySpec& t, int64_t n_sites)
    : n_ci_(t.n_ci()),
      n_per_block_(t.n_per_block()),
      n_blocks_(t.n_blocks()),
      n_ppgd_(t.n_ppgd()),
      world_(t.world_size()),
      n_sites_(n_sites) {
  if (t.family() != TopologyFamily::kThreePool) throw InputError("a three-pool layout needs n_ci and n_per_block");
  if (n_blocks_ > n_sites_) {
    throw InputError(str_cat("--topology ", t.str(), ": n_blocks=", n_blocks_, " exceeds the workload's ", n_sites_,
                             " decomposed sites (every block must own at least one)"));
  }
}

PoolRole ThreePoolLayout::role(int rank) const {
  if (rank < n_ci_) return PoolRole::kCi;
  if (rank < n_ci_ + n_blocks_ * n_per_block_) return PoolRole::kBlock;
  return PoolRole::kPpgd;
}

int64_t ThreePoolLayout::block_of(int rank) const {
  return (rank - n_ci_) / n_per_block_;
}

int64_t ThreePoolLayout::index_in_pool(int rank) const {
  switch (role(rank)) {
    case PoolRole::kCi:
      return rank;
    case PoolRole::kBlock:
      return (rank - n_ci_) % n_per_block_;
    case PoolRole::kPpgd:
      return rank - n_ci_ - n_blocks_ * n_per_block_;
  }
  return 0;
}

std::vector<int> ThreePoolLayout::ci_ranks() const {
  std::vector<int> r;
  for (int64_t i = 0; i < n_ci_; ++i) r.push_back(static_cast<int>(i));
  return r;
}

std::vector<int> ThreePoolLayout::block_ranks(int64_t block) const {
  std::vector<int> r;
  for (int64_t i = 0; i < n_per_block_; ++i) r.push_back(static_cast<int>(n_ci_ + block * n_per_block_ + i));
  return r;
}

std::vector<int> ThreePoolLayout::ppgd_ranks() const {
  std::vector<int> r;
  for (int64_t i = 0; i < n_ppgd_; ++i) r.push_back(static_cast<int>(n_ci_ + n_blocks_ * n_per_block_ + i));
  return r;
}

std::vector<int64_t> ThreePoolLayout::sites_of_block(int64_t block) const {
  auto [begin, end] = shard_range(n_sites_, static_cast<int>(block), static_cast<int>(n_blocks_));
  std::vector<int64_t> sites;
  for (int64_t s = begin; s < end; ++s) sites.push_back(s);
  return sites;
}

int64_t ThreePoolLayout::block_of_site(int64_t site) const {
  for (int64_t k = 0; k < n_blocks_; ++k) {
    auto [begin, end] = shard_range(n_sites_, static_cast<int>(k), static_cast<int>(n_blocks_));
    if (site >= begin && site < end) return k;
  }
  return -1;
}

void ThreePoolLayout::check_batch(int64_t batch, const std::string& what) const {
  for (auto [name, size] :
       {std::pair<const char*, int64_t>{"n_ci", n_ci_}, {"n_per_block", n_per_block_}, {"n_ppgd", n_ppgd_}}) {
    if (batch % size != 0) {
      throw InputError(str_cat(what, ": the global batch of ", batch, " rows does not split evenly over ", name, "=",
                               size, " ranks; every pool's shards must be equal"));
    }
  }
  auto nest = [&](const char* a, int64_t na, const char* b, int64_t nb) {
    const int64_t sa = batch / na, sb = batch / nb;
    if (sa % sb != 0 && sb % sa != 0) {
      throw InputError(str_cat(what, ": batch splits between pools must divide each other: ", a, "=", na, " gives ", sa,
                               "-row shards, ", b, "=", nb, " gives ", sb,
                               "-row shards, and neither size divides the other, so a shard of one pool would "
                               "straddle two shards of the other"));
    }
  };
  nest("n_ci", n_ci_, "n_per_block", n_per_block_);
  nest("n_ci", n_ci_, "n_ppgd", n_ppgd_);
}

}  // namespace magic::dist
