#include "lib/distributed/parallel/mesh_explain.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "lib/core/strings.h"
#include "lib/distributed/parallel/mesh_layout.h"

namespace magic::dist {

namespace {

std::string members(const std::vector<int>& ranks) {
  std::vector<std::string> names;
  for (int r : ranks) names.push_back(std::to_string(r));
  return join(names, ",");
}

// Rows of cells printed as columns two blanks apart, each as wide as its widest cell; numbers
// (the first `numeric` columns) right-aligned, member lists left-aligned.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows, size_t numeric) {
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      const std::string blanks(width[c] - row[c].size(), ' ');
      line += c < numeric ? blanks + row[c] : row[c] + blanks;
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
}

}  // namespace

std::string explain_mesh_layout(const TopologySpec& topology) {
  const MeshLayout layout(topology);
  std::ostringstream out;
  out << "layout " << topology.str() << ": " << layout.world_size() << " ranks = dp " << layout.dp() << " x cp "
      << layout.cp() << " x tp " << layout.tp();
  if (layout.fsdp() > 1) out << "; fsdp=" << layout.fsdp() << ": parameters sharded over consecutive dp indices";
  if (topology.mb() > 1) out << "; mb=" << topology.mb() << " micro-batches a step";
  out << "\n"
      << "rank = (dp_index*cp + cp_index)*tp + tp_index: tp fastest, then cp, then dp; shard index = dp_index % fsdp\n"
      << "groups (member ranks, in group-rank order):\n"
      << "  tp       same dp, cp index: the tensor-parallel collectives (linears, vocabulary-parallel loss)\n"
      << "  cp       same dp, tp index: attention's key/value all-gather\n"
      << "  shard    same dp_index / fsdp, cp, tp index: the all-gather of parameter shards\n"
      << "  replica  same shard index, tp index: the ranks holding one parameter piece (gradient sum)\n"
      << "  batch    same tp index: the ranks splitting the batch's rows and columns (loss and score sums)\n";
  if (topology.sp())
    out << "  replica_tp  same shard index: the replicated parameters' gradient sum over sp's shards\n";
  out << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"rank", "dp", "cp", "tp", "shard", "tp group", "cp group", "shard group", "replica group", "batch group"}};
  if (topology.sp()) rows.front().push_back("replica_tp group");
  for (int r = 0; r < layout.world_size(); ++r) {
    rows.push_back({std::to_string(r), std::to_string(layout.dp_index(r)), std::to_string(layout.cp_index(r)),
                    std::to_string(layout.tp_index(r)), std::to_string(layout.shard_index(r)),
                    members(layout.tp_group(r)), members(layout.cp_group(r)), members(layout.shard_group(r)),
                    members(layout.replica_group(r)), members(layout.batch_group(r))});
    if (topology.sp()) rows.back().push_back(members(layout.replica_tp_group(r)));
  }
  print_table(out, rows, 5);
  return out.str();
}

}  // namespace magic::dist
