#include "lib/distributed/runtime/topology.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "lib/core/error.h"
#include "lib/core/nearest_word.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/world_bound.h"

namespace magic::dist {
namespace {

const std::vector<std::string>& three_pool_keys() {
  static const std::vector<std::string> keys{"n_ci", "n_per_block", "n_blocks", "n_ppgd"};
  return keys;
}
bool contains(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

[[noreturn]] void reject(const std::string& text, const std::string& why) {
  throw InputError(str_cat("--topology '", text, "': ", why, "; expected key=value[,key=value...] with integers >= 1",
                           " and keys from: ", join(topology_keys(), ", "),
                           " (mesh: dp, optionally cp, tp, fsdp, pp, vpp, cp_impl=gather|ring, the flag sp and mb; "
                           "three-pool: n_ci and n_per_block, optionally",
                           " n_blocks and n_ppgd)"));
}

}  // namespace

const std::vector<std::string>& topology_keys() {
  static const std::vector<std::string> keys{"dp",  "cp",      "tp",   "fsdp",        "sp",       "mb",    "pp",
                                             "vpp", "cp_impl", "n_ci", "n_per_block", "n_blocks", "n_ppgd"};
  return keys;
}

TopologyFamily TopologySpec::family() const {
  for (const auto& key : three_pool_keys()) {
    if (values.count(key)) return TopologyFamily::kThreePool;
  }
  return TopologyFamily::kMesh;
}

int64_t TopologySpec::get(const std::string& key, int64_t fallback) const {
  auto it = values.find(key);
  return it == values.end() ? fallback : it->second;
}

int64_t TopologySpec::world_size() const {
  if (family() == TopologyFamily::kMesh) return pp() * dp() * cp() * tp();
  return n_ci() + n_blocks() * n_per_block() + n_ppgd();
}

BridgeTopology TopologySpec::bridge() const {
  if (!is_bridge()) throw std::logic_error("TopologySpec::bridge on " + str());
  return BridgeTopology::parse(text);
}

std::string TopologySpec::str() const {
  if (is_bridge()) return bridge().str();
  if (family() == TopologyFamily::kMesh) {
    return str_cat("dp=", dp(), cp() > 1 ? str_cat(",cp=", cp()) : "", tp() > 1 ? str_cat(",tp=", tp()) : "",
                   fsdp() > 1 ? str_cat(",fsdp=", fsdp()) : "", pp() > 1 ? str_cat(",pp=", pp()) : "",
                   vpp() > 1 ? str_cat(",vpp=", vpp()) : "", ring() ? ",cp_impl=ring" : "", sp() ? ",sp" : "",
                   mb() > 1 ? str_cat(",mb=", mb()) : "");
  }
  return str_cat("n_ci=", n_ci(), ",n_per_block=", n_per_block(), ",n_blocks=", n_blocks(), ",n_ppgd=", n_ppgd());
}

std::vector<std::pair<std::string, int64_t>> TopologySpec::named_sizes() const {
  if (family() == TopologyFamily::kMesh)
    return {{"dp", dp()}, {"cp", cp()}, {"tp", tp()}, {"fsdp", fsdp()}, {"pp", pp()}, {"mb", mb()}};
  return {{"n_ci", n_ci()},
          {"n_per_block", n_per_block()},
          {"n_blocks", n_blocks()},
          {"n_ppgd", n_ppgd()},
          {"world", world_size()}};
}

TopologySpec TopologySpec::parse(const std::string& text) {
  TopologySpec spec;
  spec.text = text;
  if (text.empty()) reject(text, "empty topology");
  if (is_bridge_topology(text)) {
    const BridgeTopology bridge = BridgeTopology::parse(text);
    spec.values = {{"dp", bridge.lm.dp},
                   {"cp", bridge.lm.cp},
                   {"tp", bridge.lm.tp},
                   {"fsdp", bridge.lm.fsdp},
                   {"enc_tp", bridge.encoder.tp},
                   {"enc_dp", bridge.encoder.dp},
                   {"enc_fsdp", bridge.encoder.fsdp}};
    return spec;
  }
  for (const std::string& item : split(text, ',')) {
    if (item == "sp") {  // the one flag: sequence parallelism
      if (spec.values.count(item)) reject(text, "key 'sp' given twice");
      spec.values[item] = 1;
      continue;
    }
    const size_t eq = item.find('=');
    if (item.empty() || eq == std::string::npos) reject(text, str_cat("'", item, "' is not key=value"));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!contains(topology_keys(), key)) {
      const std::string near = nearest_word(key, topology_keys());
      reject(text, str_cat("unknown key '", key, "'", near.empty() ? "" : " (did you mean " + near + "?)"));
    }
    if (key == "sp") reject(text, "sp is a flag: write ',sp', without a value");
    if (spec.values.count(key)) reject(text, str_cat("key '", key, "' given twice"));
    if (key == "cp_impl") {  // the one key with a word for its value
      if (value != "gather" && value != "ring") reject(text, str_cat("cp_impl=", value, ": expected gather or ring"));
      spec.values[key] = value == "ring" ? 1 : 0;
      continue;
    }
    errno = 0;
    char* end = nullptr;
    const long long number = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno != 0) reject(text, str_cat(key, "=", value, " is not an integer"));
    if (number < 1) reject(text, str_cat(key, "=", value, " must be >= 1"));
    spec.values[key] = number;
  }
  if (spec.family() == TopologyFamily::kThreePool) {
    for (const char* mesh : {"dp", "cp", "tp", "fsdp", "sp", "mb", "pp", "vpp", "cp_impl"}) {
      if (spec.values.count(mesh)) reject(text, str_cat(mesh, " cannot be combined with the three-pool keys"));
    }
    for (const char* required : {"n_ci", "n_per_block"}) {
      if (!spec.values.count(required)) reject(text, str_cat("a three-pool layout needs ", required));
    }
  }
  const bool bounded =
      spec.family() == TopologyFamily::kMesh
          ? bounded_product({spec.pp(), spec.dp(), spec.cp(), spec.tp()}).has_value()
          : bounded_sum({spec.n_ci(), bounded_product({spec.n_blocks(), spec.n_per_block()}), spec.n_ppgd()})
                .has_value();
  if (!bounded) reject(text, str_cat("a world of more than the ", kMaxWorldSize, " ranks c10d can number"));
  // Batch sizes are formed from dp x mb (a replica's rows, the default batch): mb is held to the
  // same bound, so that they fit int64.
  if (spec.mb() > kMaxWorldSize)
    reject(text, str_cat("mb=", spec.mb(), " is more than ", kMaxWorldSize, " micro-batches"));
  if (spec.family() == TopologyFamily::kMesh && spec.dp() % spec.fsdp() != 0) {
    reject(text, str_cat("fsdp=", spec.fsdp(), " must divide dp=", spec.dp(),
                         " (parameters are sharded fsdp ways inside groups of data-parallel replicas)"));
  }
  if (spec.vpp() > 1 && spec.pp() == 1) {
    reject(text,
           str_cat("vpp=", spec.vpp(), " needs pp > 1 (virtual stages interleave the layers of a pipeline's stages)"));
  }
  if (spec.ring() && spec.cp() == 1) {
    reject(text, "cp_impl=ring needs cp > 1 (ring attention passes keys and values around the cp ranks)");
  }
  if (spec.ring() && spec.sp()) reject(text, "cp_impl=ring with sp is not supported yet: use cp_impl=gather");
  if (spec.sp() && spec.tp() == 1) {
    reject(text, "sp needs tp > 1 (sequence parallelism splits the sequence across the tensor-parallel ranks)");
  }
  return spec;
}

}  // namespace magic::dist
