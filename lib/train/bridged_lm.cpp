#include "lib/train/bridged_lm.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/bridged_parallelism.h"
#include "lib/distributed/parallel/bridged_prefix.h"

namespace magic {

void require_bridge_fits(const dist::TopologySpec& topology, const GptConfig& model, const PatchEncoderConfig* encoder,
                         int64_t batch, const std::string& batch_name) {
  const dist::BridgeTopology bridge = topology.bridge();
  const std::string what = str_cat("--topology ", bridge.str());
  if (encoder == nullptr) {
    throw InputError(what +
                     ": a bridge layout joins an encoder and a language model; the run has no encoder "
                     "(a multimodal run's config has an \"encoder\" section and data.patches)");
  }
  validate_tensor_parallel(model, bridge.lm.tp, what + " (lm)");
  validate_encoder_tensor_parallel(*encoder, bridge.encoder.tp, what);
  bridge.check_batch(batch, batch_name);
}

BridgedLmParts bridged_lm_parts(const dist::Runtime& runtime, const dist::TopologySpec& topology,
                                const GptConfig& model, const PatchEncoderConfig& encoder) {
  BridgedLmParts parts{dist::BridgeLayout(topology.bridge()), {}, {}, {}};
  parts.groups = dist::make_bridge_groups(runtime, parts.layout);
  // Only the shapes matter here: the parts shard tensors shaped like the parameters.
  parts.encoder = dist::mesh_parts(parts.groups.encoder, patch_encoder_init(encoder, at::kDouble, 0),
                                   patch_encoder_parallel_plan());
  parts.lm = dist::mesh_parts(parts.groups.lm, gpt_init(model, at::kDouble, 0), gpt_parallel_plan());
  return parts;
}

BridgedLm bridged_lm(const dist::Runtime& runtime, const BridgedLmParts& parts, const PatchEncoderConfig& encoder,
                     std::shared_ptr<const Parallelism> encoder_side, std::shared_ptr<const Parallelism> lm,
                     std::shared_ptr<const dist::Bridge> bridge) {
  if (!lm) lm = std::make_shared<dist::DataParallel>(parts.lm, dist::Convention::kSum);
  if (!bridge) bridge = std::make_shared<dist::Bridge>(parts.layout.kind(), parts.groups.bridge, parts.groups.lm.cp);
  if (!encoder_side) encoder_side = std::make_shared<dist::DataParallel>(parts.encoder, dist::Convention::kSum);
  return {std::make_shared<dist::BridgedParallelism>(encoder_side, std::move(lm)),
          std::make_shared<dist::BridgedPrefix>(encoder, parts.layout, runtime.rank(), parts.encoder.tensor,
                                                std::move(bridge))};
}

}  // namespace magic
