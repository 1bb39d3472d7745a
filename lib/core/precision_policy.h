// A run's mixed-precision policy, as trainers state it (FSDP2's MixedPrecisionPolicy, Megatron's
// grad-reduce-in-fp32):
//   compute     the dtype of the forward and backward (activations, the parameters as used)
//   master      stored parameters, optimizer state, data weights and the loss (fp32 "master
//               weights" under bf16/fp16 compute)
//   reduce      the dtype gradients are summed across ranks in
//   loss_scale  static fp16 loss scale S: the backward differentiates S·L and gradients are
//               divided by S before clipping and the update (a power of two, so both are exact)
// The shorthand "bf16" means {compute bf16, master fp32, reduce fp32, loss_scale 1}; "fp16" the
// same with loss_scale 1024; "fp32" and "fp64" run everything in that dtype.
#pragma once

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <string>

namespace magic {

class JsonFields;

struct PrecisionPolicy {
  c10::ScalarType compute = c10::kDouble;
  c10::ScalarType master = c10::kDouble;
  c10::ScalarType reduce = c10::kDouble;
  double loss_scale = 1.0;

  static constexpr double kDefaultFp16LossScale = 1024.0;

  // The shorthand for a compute dtype (see above).
  static PrecisionPolicy for_compute(c10::ScalarType compute);
  // `parent`'s `key` (`fallback` where absent): "bf16" or {"compute": "bf16", "master": "fp32",
  // "reduce": "fp32", "loss_scale": 1}; omitted keys take the shorthand's values. InputError naming
  // the input that gave the value (json_fields.h) for anything else.
  static PrecisionPolicy from_json(const JsonFields& parent, const std::string& key, const std::string& fallback);

  // Whether the compute dtype differs from fp64 (the golden reference's dtype).
  bool low_precision() const { return compute != c10::kDouble; }
  // "bf16" for a shorthand policy, else "bf16 compute, fp32 master, bf16 reduce, loss scale 1024".
  std::string str() const;
  nlohmann::json to_json() const;
  // InputError naming `what` when the policy is not one a trainer would run.
  void validate(const std::string& what) const;
};

bool operator==(const PrecisionPolicy& a, const PrecisionPolicy& b);

// Unit roundoff u = 2^-p of round-to-nearest in a dtype with p significand bits:
// fp64 2^-53, fp32 2^-24, bf16 2^-8, fp16 2^-11.
double unit_roundoff(c10::ScalarType dtype);

}  // namespace magic
