// BridgeTopology: a colocated encoder and language model on different layouts of one world,
// "enc=tp2,dp4;lm=tp2,dp2,cp2" (docs/magic-check.md, "Encoder and language model: the bridge").
//   enc: tpA, dpB, fsdpF (defaults 1; cp1 only: the encoder's inputs are not split by position)
//   lm:  tpC, dpD, cpE, fsdpF (defaults 1)
//   order=...: the rank order, fastest first; only Megatron's, tp-dp (enc) and tp-cp-dp (lm)
// Rules, each an InputError naming the input before any rank starts: A·B = C·D·E (one world);
// B divides D or D divides B (fan-in, fan-out or equal); fsdp divides its side's dp; encoder cp 1;
// no other key, order or repeat.
#pragma once

#include <cstdint>
#include <string>

namespace magic::dist {

struct BridgeSide {
  int64_t tp = 1, dp = 1, cp = 1, fsdp = 1;
  int64_t world_size() const { return tp * dp * cp; }
};

enum class BridgeKind { kEqual, kFanIn, kFanOut };

struct BridgeTopology {
  BridgeSide encoder, lm;
  std::string text;  // as given

  int64_t world_size() const { return encoder.world_size(); }
  // enc dp > lm dp: each lm rank gathers several encoder shards; < : each shard feeds several.
  BridgeKind kind() const;
  // max(B, D) / min(B, D): the encoder shards an lm rank gathers, or the lm ranks a shard feeds.
  int64_t ratio() const;
  // Canonical form: "enc=tp2,dp4;lm=tp2,dp2,cp2" (each size > 1; dp always).
  std::string str() const;
  // A global batch of `rows` that both sides split evenly and nested (rows % max(B, D) == 0), or
  // an InputError naming `what` and the sizes.
  void check_batch(int64_t rows, const std::string& what) const;

  static BridgeTopology parse(const std::string& text);
};

// Whether --topology `text` names a bridge layout (an "enc=" or "lm=" side), not a mesh or
// three-pool one.
bool is_bridge_topology(const std::string& text);

const char* bridge_kind_name(BridgeKind kind);

}  // namespace magic::dist
