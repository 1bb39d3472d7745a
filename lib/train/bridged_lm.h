// The multimodal LM workload on a bridge layout (enc=...;lm=..., docs/magic-check.md, "Encoder
// and language model: the bridge"): the one place where magic-check's lm workload (and magic-run)
// get the two meshes, the bridge and the prefix, so both run the same step on them.
#pragma once

#include <memory>

#include "lib/distributed/parallel/bridge.h"
#include "lib/distributed/parallel/bridge_layout.h"
#include "lib/distributed/parallel/data_parallel.h"
#include "lib/distributed/runtime/runtime.h"
#include "lib/distributed/runtime/topology.h"
#include "lib/model/gpt.h"
#include "lib/model/patch_encoder.h"
#include "lib/step/prefix_encoder.h"

namespace magic {

// InputError naming the topology, before any rank starts, unless a multimodal run with `encoder`
// (null: a text-only run, which a bridge layout cannot run) fits it: tp of each side splits its
// model, the SUM convention, and both sides
// split `batch` rows (`batch_name`: where it came from) evenly.
void require_bridge_fits(const dist::TopologySpec& topology, const GptConfig& model, const PatchEncoderConfig* encoder,
                         int64_t batch, const std::string& batch_name);

// This rank's groups and the correct pieces of both sides. Every rank calls it, in the same order.
struct BridgedLmParts {
  dist::BridgeLayout layout;
  dist::BridgeGroups groups;
  dist::MeshParts encoder, lm;
};
BridgedLmParts bridged_lm_parts(const dist::Runtime& runtime, const dist::TopologySpec& topology,
                                const GptConfig& model, const PatchEncoderConfig& encoder);

// The step's Parallelism (dist::BridgedParallelism) and prefix (dist::BridgedPrefix) from the
// parts, the encoder's side `encoder_side`, the language model's side `lm` and the `bridge`
// (planted variants of them in magic-check; null: the correct ones).
struct BridgedLm {
  std::shared_ptr<const Parallelism> parallelism;
  std::shared_ptr<const PrefixEncoder> prefix;
};
BridgedLm bridged_lm(const dist::Runtime& runtime, const BridgedLmParts& parts, const PatchEncoderConfig& encoder,
                     std::shared_ptr<const Parallelism> encoder_side = nullptr,
                     std::shared_ptr<const Parallelism> lm = nullptr,
                     std::shared_ptr<const dist::Bridge> bridge = nullptr);

}  // namespace magic
