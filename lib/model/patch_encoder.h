// The multimodal workload's encoder (docs/magic-check.md, "Encoder and language model: the
// bridge"): a LayerNorm and an MLP over each example's patch features, whose outputs are the
// language model's prefix embeddings, one per patch:
//   prefix = proj(gelu(fc(ln(patches)))),   patches [B, P, F] -> [B, P, d_model]
// A pure function of its parameter tree, named "encoder.*" beside the GPT's. With tensor
// parallelism fc is column-parallel and proj row-parallel (Megatron's MLP split), so the prefix
// comes out replicated on every tp rank.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "lib/core/json_fields.h"
#include "lib/core/tensor_tree.h"
#include "lib/model/parallel_plan.h"
#include "lib/model/tensor_parallel.h"

namespace magic {

struct PatchEncoderConfig {
  int64_t patches = 4;   // P: prefix positions per example
  int64_t features = 8;  // F: features per patch
  int64_t hidden = 32;   // the MLP's width
  int64_t d_model = 32;  // the language model's (the projection's output)

  // Reads {"patches", "features", "hidden"}; d_model is the language model's. Validates each.
  static PatchEncoderConfig from_json(const JsonFields& fields, int64_t d_model);
  void validate(const std::string& where) const;
};

// Every encoder parameter's name begins with this.
inline constexpr const char* kEncoderPrefix = "encoder.";
bool is_encoder_parameter(const std::string& name);

// N(0, 0.02) weights, zero biases, unit LayerNorm gain, from one seed (its own stream, apart from
// the GPT's).
TensorTree patch_encoder_init(const PatchEncoderConfig& config, c10::ScalarType dtype, uint64_t seed);

// [B, P, d_model] for patches [B, P, F] (cast to the parameters' dtype); `params` may hold other
// (the GPT's) entries too. With `tensor` of size > 1, `params` are this rank's pieces
// (patch_encoder_parallel_plan).
at::Tensor patch_encoder_forward(const PatchEncoderConfig& config, const TensorTree& params, const at::Tensor& patches,
                                 const TensorParallel& tensor = SingleRank());

const ParallelPlan& patch_encoder_parallel_plan();
// InputError naming `what` unless tp ranks can split the MLP: tp must divide hidden.
void validate_encoder_tensor_parallel(const PatchEncoderConfig& config, int64_t tp, const std::string& what);

}  // namespace magic
