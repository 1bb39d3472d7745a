#include "lib/distributed/runtime/bridge_topology.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <vector>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/world_bound.h"

namespace magic::dist {
namespace {

const char* kExpected =
    "expected enc=tpA,dpB[,fsdpF];lm=tpC,dpD,cpE[,fsdpF] (sizes >= 1, a missing one is 1), e.g. "
    "enc=tp2,dp4;lm=tp2,dp2,cp2";

[[noreturn]] void reject(const std::string& text, const std::string& why) {
  throw InputError(str_cat("--topology '", text, "': ", why, "; ", kExpected));
}

// "tp2" -> ("tp", 2); the key's letters, then an integer >= 1.
std::pair<std::string, int64_t> size_item(const std::string& text, const std::string& side, const std::string& item) {
  size_t digits = 0;
  while (digits < item.size() && std::isalpha(static_cast<unsigned char>(item[digits]))) ++digits;
  const std::string key = item.substr(0, digits), value = item.substr(digits);
  if (key != "tp" && key != "dp" && key != "cp" && key != "fsdp") {
    reject(text, str_cat(side, ": unknown item '", item, "' (", side, " takes tp, dp", side == "lm" ? ", cp" : "",
                         ", fsdp and order=)"));
  }
  errno = 0;
  char* end = nullptr;
  const long long number = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || number < 1) {
    reject(text, str_cat(side, ": '", item, "' is not ", key, " followed by an integer >= 1"));
  }
  return {key, number};
}

BridgeSide parse_side(const std::string& text, const std::string& side, const std::string& items) {
  const std::string megatron = side == "enc" ? "tp-dp" : "tp-cp-dp";
  std::map<std::string, int64_t> sizes;
  if (items.empty()) reject(text, str_cat(side, "= has no sizes"));
  for (const std::string& item : split(items, ',')) {
    if (item.rfind("order=", 0) == 0) {
      if (item.substr(6) != megatron) {
        reject(text,
               str_cat(side, ": rank order '", item.substr(6), "' is not supported: the bridge's rank mapping is ",
                       megatron, " (tp fastest, dp slowest, Megatron's), on both sides"));
      }
      continue;
    }
    const auto [key, number] = size_item(text, side, item);
    if (sizes.count(key)) reject(text, str_cat(side, ": ", key, " given twice"));
    sizes[key] = number;
  }
  BridgeSide s;
  auto get = [&](const char* key) { return sizes.count(key) ? sizes.at(key) : 1; };
  s.tp = get("tp");
  s.dp = get("dp");
  s.cp = get("cp");
  s.fsdp = get("fsdp");
  if (side == "enc" && s.cp != 1) {
    reject(text, str_cat("enc: cp", s.cp, " is not supported: the encoder's inputs (patch features) are not split by ",
                         "position; context parallelism belongs to the language model"));
  }
  if (s.dp % s.fsdp != 0) reject(text, str_cat(side, ": fsdp", s.fsdp, " must divide dp", s.dp));
  if (!bounded_product({s.tp, s.dp, s.cp})) {
    reject(text, str_cat(side, ": tp", s.tp, " x dp", s.dp, " x cp", s.cp, " is more than the ", kMaxWorldSize,
                         " ranks c10d can number"));
  }
  return s;
}

std::string side_text(const BridgeSide& s, bool with_cp) {
  std::vector<std::string> items;
  if (s.tp > 1) items.push_back(str_cat("tp", s.tp));
  items.push_back(str_cat("dp", s.dp));
  if (with_cp && s.cp > 1) items.push_back(str_cat("cp", s.cp));
  if (s.fsdp > 1) items.push_back(str_cat("fsdp", s.fsdp));
  return join(items, ",");
}

}  // namespace

bool is_bridge_topology(const std::string& text) {
  return text.rfind("enc=", 0) == 0 || text.rfind("lm=", 0) == 0 || text.find(";enc=") != std::string::npos ||
         text.find(";lm=") != std::string::npos;
}

const char* bridge_kind_name(BridgeKind kind) {
  switch (kind) {
    case BridgeKind::kFanIn:
      return "fan-in";
    case BridgeKind::kFanOut:
      return "fan-out";
    case BridgeKind::kEqual:
      break;
  }
  return "equal";
}

BridgeKind BridgeTopology::kind() const {
  if (encoder.dp > lm.dp) return BridgeKind::kFanIn;
  return encoder.dp < lm.dp ? BridgeKind::kFanOut : BridgeKind::kEqual;
}

int64_t BridgeTopology::ratio() const {
  return encoder.dp > lm.dp ? encoder.dp / lm.dp : lm.dp / encoder.dp;
}

std::string BridgeTopology::str() const {
  return str_cat("enc=", side_text(encoder, false), ";lm=", side_text(lm, true));
}

void BridgeTopology::check_batch(int64_t rows, const std::string& what) const {
  const int64_t step = std::max(encoder.dp, lm.dp);
  if (rows < step || rows % step != 0) {
    throw InputError(str_cat(what, ": ", rows, " rows cannot be split by both sides of ", str(), ": the encoder's dp",
                             encoder.dp, " and the language model's dp", lm.dp, " each take whole, equal shards, ",
                             "nested in one another; expected a multiple of ", step));
  }
}

BridgeTopology BridgeTopology::parse(const std::string& text) {
  BridgeTopology t;
  t.text = text;
  const std::vector<std::string> sides = split(text, ';');
  std::map<std::string, BridgeSide> parsed;
  for (const std::string& side : sides) {
    const size_t eq = side.find('=');
    const std::string name = eq == std::string::npos ? side : side.substr(0, eq);
    if (name != "enc" && name != "lm") reject(text, str_cat("'", side, "' is neither enc=... nor lm=..."));
    if (parsed.count(name)) reject(text, str_cat(name, "= given twice"));
    parsed[name] = parse_side(text, name, side.substr(eq + 1));
  }
  for (const char* name : {"enc", "lm"}) {
    if (!parsed.count(name)) reject(text, str_cat("no ", name, "= side"));
  }
  t.encoder = parsed.at("enc");
  t.lm = parsed.at("lm");
  if (t.encoder.world_size() != t.lm.world_size()) {
    reject(text, str_cat("the two sides need one world: the encoder's tp", t.encoder.tp, " x dp", t.encoder.dp, " = ",
                         t.encoder.world_size(), " ranks, the language model's tp", t.lm.tp, " x dp", t.lm.dp, " x cp",
                         t.lm.cp, " = ", t.lm.world_size()));
  }
  if (t.encoder.dp % t.lm.dp != 0 && t.lm.dp % t.encoder.dp != 0) {
    reject(text, str_cat("neither dp divides the other (encoder dp", t.encoder.dp, ", language model dp", t.lm.dp,
                         "): the bridge fans in (one divides the other one way) or out (the other way)"));
  }
  return t;
}

}  // namespace magic::dist
