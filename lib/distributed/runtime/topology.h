// TopologySpec: the layout string of magic-check --topology, "key=value[,key=value...]" with
// integers >= 1 (docs/design.md, "Distribution"). Two families:
//   mesh:       dp (data-parallel replicas, default 1), cp (context-parallel ranks inside a replica,
//               default 1), tp (tensor-parallel ranks, default 1), fsdp (parameter shard group,
//               default 1, must divide dp); world = dp * cp * tp. Rank order: tp varies fastest,
//               then cp, then dp (Megatron's order; mesh_layout.h); fsdp = dp is full sharding,
//               1 < fsdp < dp hybrid. Two step options ride along: `sp` (a bare flag: sequence
//               parallelism, needs tp > 1) and mb (micro-batches per optimizer step, default 1).
//               pp (pipeline stages, default 1) and vpp (virtual stages per pipeline stage, default
//               1, needs pp > 1) make world = pp * dp * cp * tp, pp outermost; the pipeline's
//               schedule comes from its own flag (--schedule: `schedule`, "1f1b" or "gpipe").
//               cp_impl=gather|ring (the one word-valued key; default gather): how attention
//               reaches the other cp ranks' keys, gathered or by ring attention (needs cp > 1,
//               not with sp).
//   three-pool: n_ci, n_per_block (both required), n_blocks (default 2), n_ppgd (default 2);
//               world = n_ci + n_blocks * n_per_block + n_ppgd.
//   bridge:     "enc=tpA,dpB;lm=tpC,dpD,cpE" (bridge_topology.h), a colocated encoder and language
//               model: a mesh whose sizes (dp, cp, tp, fsdp) are the language model's, the
//               encoder's beside them (enc_tp, enc_dp, enc_fsdp). Everything that runs on a mesh
//               runs the language model's side; the encoder's side and the bridge are built apart.
// Unknown keys, non-integers, zero, duplicates, mixed families and sp without tp: InputError
// naming the rule and listing the valid keys.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lib/distributed/runtime/bridge_topology.h"

namespace magic::dist {

enum class TopologyFamily { kMesh, kThreePool };

struct TopologySpec {
  std::map<std::string, int64_t> values;  // as given
  std::string text;                       // the original string

  TopologyFamily family() const;
  int64_t get(const std::string& key, int64_t fallback) const;
  int64_t dp() const { return get("dp", 1); }
  int64_t cp() const { return get("cp", 1); }
  int64_t fsdp() const { return get("fsdp", 1); }
  int64_t tp() const { return get("tp", 1); }
  bool sp() const { return values.count("sp") > 0; }
  int64_t mb() const { return get("mb", 1); }
  int64_t pp() const { return get("pp", 1); }
  int64_t vpp() const { return get("vpp", 1); }
  bool ring() const { return get("cp_impl", 0) == 1; }  // cp_impl=ring (ring attention), else gather
  std::string schedule = "1f1b";                        // the pipeline's (pipeline_schedule.h); set from --schedule
  int64_t n_ci() const { return get("n_ci", 1); }
  int64_t n_per_block() const { return get("n_per_block", 1); }
  int64_t n_blocks() const { return get("n_blocks", 2); }
  int64_t n_ppgd() const { return get("n_ppgd", 2); }
  int64_t world_size() const;
  // A bridge layout (family kMesh: its language model's mesh), and its two sides.
  bool is_bridge() const { return values.count("enc_dp") > 0; }
  BridgeTopology bridge() const;
  // Canonical form (a bridge's: BridgeTopology::str): "dp=4", "dp=2,cp=2,tp=2,fsdp=2,pp=2,vpp=2,sp,mb=3" (each of cp,
  // tp, fsdp, pp, vpp, mb when > 1), "n_ci=4,n_per_block=2,n_blocks=2,n_ppgd=2" (three-pool defaults spelled out).
  std::string str() const;
  // The sizes a scale error can be a multiple of, by name, for the diagnosis ("dp", 4).
  std::vector<std::pair<std::string, int64_t>> named_sizes() const;

  static TopologySpec parse(const std::string& text);
};

// The keys parse() accepts.
const std::vector<std::string>& topology_keys();

}  // namespace magic::dist
