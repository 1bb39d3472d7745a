// Golden values for the multimodal pieces the reference and the engine share
// (patch_encoder_forward, gpt_forward with a prefix): the prefix, logits, loss, every parameter's
// gradient and one Hessian-vector product, computed by PyTorch's own modules in
// fixtures/golden/make_multimodal_golden.py (an independent implementation), compared at 1e-12.
// The planted variants below (the prefix one column late, the encoder's GELU in its tanh form)
// fail the comparison: the golden values can see a bug both pipelines would share.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "lib/io/safetensors.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"
#include "lib/model/patch_encoder.h"
#include "tests/support.h"

namespace magic {
namespace {

struct Golden {
  GptConfig gpt;
  PatchEncoderConfig encoder;
  TensorTree all, params;
};

const Golden& golden() {
  static const Golden g = [] {
    SafetensorsFile f = load_safetensors(testing::source_path("fixtures/golden/multimodal_golden.safetensors"));
    auto integer = [&](const char* key) { return static_cast<int64_t>(std::stoll(f.metadata.at(key))); };
    Golden out;
    out.gpt =
        GptConfig{integer("vocab"), integer("d_model"), integer("n_layers"), integer("n_heads"), integer("max_len")};
    out.encoder = PatchEncoderConfig{integer("patches"), integer("features"), integer("hidden"), integer("d_model")};
    out.all = f.tensors;
    out.params = f.tensors.strip_prefix("param.");
    return out;
  }();
  return g;
}

enum class Plant { kNone, kPrefixOneColumnLate, kTanhGelu };

struct Ours {
  at::Tensor prefix, logits, loss;
  TensorTree grad, hvp;
};

Ours compute(Plant plant = Plant::kNone) {
  const Golden& g = golden();
  const TensorTree params = g.params.requires_grad();
  const at::Tensor& ids = g.all.at("input_ids");
  Ours o;
  if (plant == Plant::kTanhGelu) {
    // The encoder written out with GELU's tanh form (GPT-2's), the one difference.
    const at::Tensor x = at::layer_norm(g.all.at("patches"), {g.encoder.features}, params.at("encoder.ln.weight"),
                                        params.at("encoder.ln.bias"), 1e-5);
    const at::Tensor h = at::gelu(at::linear(x, params.at("encoder.fc.weight"), params.at("encoder.fc.bias")), "tanh");
    o.prefix = at::linear(h, params.at("encoder.proj.weight"), params.at("encoder.proj.bias"));
  } else {
    o.prefix = patch_encoder_forward(g.encoder, params, g.all.at("patches"));
  }
  at::Tensor placed = o.prefix;
  if (plant == Plant::kPrefixOneColumnLate) {
    // Column 0 keeps its token embedding; the patches land on columns 1..P.
    placed = at::cat({params.at("tok_emb").index_select(0, ids.select(1, 0)).unsqueeze(1), o.prefix}, 1);
  }
  o.logits = gpt_forward(g.gpt, params, ids, placed);
  const at::Tensor& labels = g.all.at("labels");
  const at::Tensor mask = label_mask(labels, o.logits.scalar_type());
  o.loss = reduce_weighted_loss(next_token_losses(o.logits, labels), mask, g.all.at("weights"), Reduction::kMean,
                                mask.sum().item<double>());
  const auto leaves = params.tensors();
  o.grad = with_values(params, torch::autograd::grad({o.loss}, leaves, {}, true, true));
  o.hvp = with_values(params, torch::autograd::grad({dot(o.grad, g.all.strip_prefix("v."))}, leaves));
  return o;
}

double relative(const at::Tensor& ours, const at::Tensor& expected) {
  return ((ours.detach() - expected).abs().max() / expected.abs().max().clamp_min(1e-300)).item<double>();
}

// The worst relative error over every golden tensor, and which.
std::pair<double, std::string> worst(const Ours& o) {
  const Golden& g = golden();
  std::pair<double, std::string> w{0.0, ""};
  auto see = [&](const std::string& name, const at::Tensor& ours, const at::Tensor& expected) {
    const double e = relative(ours, expected);
    if (e >= w.first) w = {e, name};
  };
  see("prefix", o.prefix, g.all.at("prefix"));
  see("logits", o.logits, g.all.at("logits"));
  see("loss", o.loss, g.all.at("loss"));
  for (const auto& [name, expected] : g.all.strip_prefix("grad.")) see("grad." + name, o.grad.at(name), expected);
  for (const auto& [name, expected] : g.all.strip_prefix("hvp.")) see("hvp." + name, o.hvp.at(name), expected);
  return w;
}

TEST(MultimodalGolden, EncoderPrefixLogitsLossGradientAndHvpMatchPyTorch) {
  const auto [error, where] = worst(compute());
  std::printf("  worst relative error %.3g (%s)\n", error, where.c_str());
  EXPECT_LE(error, 1e-12) << where;
  // Two blocks of 12 tensors, two embeddings, the final norm's two, the head, the encoder's 6.
  EXPECT_EQ(golden().params.size(), 2u * 12 + 2 + 2 + 1 + 6);
}

TEST(MultimodalGolden, APrefixOneColumnLateOrATanhGeluFailsTheComparison) {
  for (Plant plant : {Plant::kPrefixOneColumnLate, Plant::kTanhGelu}) {
    const auto [error, where] = worst(compute(plant));
    EXPECT_GT(error, 1e-6) << "planted " << static_cast<int>(plant) << " passed: " << where;
  }
}

}  // namespace
}  // namespace magic
