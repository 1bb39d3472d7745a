#include "lib/model/patch_encoder.h"

#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/model/kernel_fallback.h"

namespace magic {

PatchEncoderConfig PatchEncoderConfig::from_json(const JsonFields& f, int64_t d_model) {
  PatchEncoderConfig c;
  c.patches = f.integer("patches", c.patches);
  c.features = f.integer("features", c.features);
  c.hidden = f.integer("hidden", c.hidden);
  f.finish();
  for (const char* key : {"patches", "features", "hidden"}) {
    if (f.has(key) && f.integer(key) < 1) f.fail(key, str_cat("expected an integer >= 1, got ", f.integer(key)));
  }
  c.d_model = d_model;
  c.validate(f.where());
  return c;
}

void PatchEncoderConfig::validate(const std::string& where) const {
  for (auto [name, v] : {std::pair<const char*, int64_t>{"patches", patches},
                         {"features", features},
                         {"hidden", hidden},
                         {"d_model", d_model}}) {
    if (v < 1) throw InputError(str_cat(where, ".", name, ": expected an integer >= 1, got ", v));
  }
}

bool is_encoder_parameter(const std::string& name) {
  return name.rfind(kEncoderPrefix, 0) == 0;
}

TensorTree patch_encoder_init(const PatchEncoderConfig& c, c10::ScalarType dtype, uint64_t seed) {
  at::Generator gen = make_generator(derive_seed(seed, "patch-encoder-init"));
  auto normal = [&](std::vector<int64_t> shape) {
    return at::normal(0.0, 0.02, shape, gen, at::TensorOptions().dtype(at::kDouble)).to(dtype);
  };
  const auto opts = at::TensorOptions().dtype(dtype);
  TensorTree p;
  p.insert("encoder.ln.weight", at::ones({c.features}, opts));
  p.insert("encoder.ln.bias", at::zeros({c.features}, opts));
  p.insert("encoder.fc.weight", normal({c.hidden, c.features}));
  p.insert("encoder.fc.bias", at::zeros({c.hidden}, opts));
  p.insert("encoder.proj.weight", normal({c.d_model, c.hidden}));
  p.insert("encoder.proj.bias", at::zeros({c.d_model}, opts));
  return p;
}

at::Tensor patch_encoder_forward(const PatchEncoderConfig& c, const TensorTree& p, const at::Tensor& patches,
                                 const TensorParallel& tensor) {
  if (patches.dim() != 3 || patches.size(1) != c.patches || patches.size(2) != c.features) {
    throw std::invalid_argument(str_cat("patch_encoder_forward: patches shaped ", patches.sizes(), ", expected [B, ",
                                        c.patches, ", ", c.features, "]"));
  }
  const at::Tensor& gain = p.at("encoder.ln.weight");
  const at::Tensor x = kernels::layer_norm(patches.to(gain.scalar_type()), gain, p.at("encoder.ln.bias"), 1e-5);
  const at::Tensor h = kernels::gelu(tensor.column_linear(x, p.at("encoder.fc.weight"), p.at("encoder.fc.bias")));
  return tensor.row_linear(h, p.at("encoder.proj.weight"), p.at("encoder.proj.bias"));
}

const ParallelPlan& patch_encoder_parallel_plan() {
  static const ParallelPlan plan{
      {"encoder.fc.weight", TensorSplit::kColumnwise},
      {"encoder.fc.bias", TensorSplit::kColumnwise},
      {"encoder.proj.weight", TensorSplit::kRowwise},
  };
  return plan;
}

void validate_encoder_tensor_parallel(const PatchEncoderConfig& c, int64_t tp, const std::string& what) {
  if (tp > 1 && c.hidden % tp != 0) {
    throw InputError(str_cat(what, ": encoder tp=", tp, " does not divide the encoder's hidden width ", c.hidden,
                             " (each tensor-parallel rank computes hidden / tp of its features)"));
  }
}

}  // namespace magic
