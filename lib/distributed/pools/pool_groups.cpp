#include "lib/distributed/pools/pool_groups.h"

#include "lib/core/strings.h"

namespace magic::dist {

ThreePoolGroups make_three_pool_groups(const Runtime& runtime, const ThreePoolLayout& layout) {
  ThreePoolGroups g;
  g.world = runtime.world();
  g.ci = runtime.shared_group("ci", layout.ci_ranks());
  for (int64_t k = 0; k < layout.n_blocks(); ++k) {
    auto block = runtime.shared_group(str_cat("block", k), layout.block_ranks(k));
    if (block) g.block = block;
  }
  g.ppgd = runtime.shared_group("ppgd", layout.ppgd_ranks());
  std::vector<int> everyone(static_cast<size_t>(runtime.world_size()));
  for (size_t r = 0; r < everyone.size(); ++r) everyone[r] = static_cast<int>(r);
  g.norm = runtime.shared_group("norm", everyone);
  return g;
}

}  // namespace magic::dist
