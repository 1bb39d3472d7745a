#include "lib/distributed/parallel/mesh_explain.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "lib/core/strings.h"
#include "lib/distributed/parallel/bridge_layout.h"
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

std::string explain_bridge_layout(const BridgeTopology& topology) {
  const BridgeLayout layout(topology);
  const MeshLayout& enc = layout.encoder();
  const MeshLayout& lm = layout.lm();
  std::ostringstream out;
  out << "layout " << topology.str() << ": " << layout.world_size() << " ranks = encoder tp " << enc.tp() << " x dp "
      << enc.dp() << " = language model tp " << lm.tp() << " x dp " << lm.dp() << " x cp " << lm.cp() << "; bridge "
      << bridge_kind_name(layout.kind());
  if (layout.kind() == BridgeKind::kFanIn) out << ": each lm rank gathers " << topology.ratio() << " encoder shards";
  if (layout.kind() == BridgeKind::kFanOut) out << ": each encoder shard feeds " << topology.ratio() << " lm dp ranks";
  out << "\n"
      << "encoder rank = enc_dp*" << enc.tp() << " + enc_tp; lm rank = (lm_dp*" << lm.cp() << " + cp)*" << lm.tp()
      << " + lm_tp: tp fastest, dp slowest, on both sides\n"
      << "groups (member ranks, in group-rank order):\n"
      << "  enc tp      same encoder dp index: the encoder's tensor-parallel collectives\n"
      << (enc.fsdp() > 1 ? "  enc dp      same encoder tp and shard index: the encoder's gradient sum over replicas\n"
                         : "  enc dp      same encoder tp index: the encoder's gradient sum\n")
      << "  lm tp, lm cp, lm batch  as in a mesh layout (--explain-layout of dp=D,cp=E,tp=C)\n";
  const bool sharded = enc.fsdp() > 1 || lm.fsdp() > 1;
  if (sharded) {
    out << "  enc shard, lm shard  each side's all-gather of parameter shards (fsdp " << enc.fsdp() << " and "
        << lm.fsdp() << "); the clip's squares are summed over each, and c enters each side's shards there\n";
  }
  if (layout.kind() == BridgeKind::kFanIn)
    out << "  bridge      same lm dp index and encoder tp index: one rank per encoder shard; forward all-gather, "
           "backward this shard's rows\n";
  if (layout.kind() == BridgeKind::kFanOut)
    out << "  bridge      same encoder dp index, lm tp and cp index: one rank per lm dp index; forward this slice, "
           "backward all-gather\n";
  if (layout.kind() == BridgeKind::kEqual) out << "  bridge      none: each rank's encoder shard is its lm shard\n";
  if (lm.cp() > 1)
    out << "  the bridge's backward sums each shard's gradient over the lm cp group before its fan step\n";
  out << "\n";
  std::vector<std::vector<std::string>> rows = {{"rank", "enc dp", "enc tp", "lm dp", "cp", "lm tp", "bridge group",
                                                 "enc tp group", "enc dp group", "lm tp group", "lm cp group",
                                                 "lm batch group"}};
  if (sharded) rows.front().insert(rows.front().end(), {"enc shard group", "lm shard group"});
  for (int r = 0; r < layout.world_size(); ++r) {
    rows.push_back({std::to_string(r), std::to_string(enc.dp_index(r)), std::to_string(enc.tp_index(r)),
                    std::to_string(lm.dp_index(r)), std::to_string(lm.cp_index(r)), std::to_string(lm.tp_index(r)),
                    members(layout.bridge_group(r)), members(enc.tp_group(r)), members(enc.replica_group(r)),
                    members(lm.tp_group(r)), members(lm.cp_group(r)), members(lm.batch_group(r))});
    if (sharded) rows.back().insert(rows.back().end(), {members(enc.shard_group(r)), members(lm.shard_group(r))});
  }
  print_table(out, rows, 6);
  return out.str();
}

}  // namespace magic::dist
