// A GPT-style causal language model as a pure function of a parameter tree: token and learned
// position embeddings, pre-LayerNorm blocks (causal multi-head self-attention, MLP d -> 4d -> d
// with GELU), final LayerNorm, untied LM head. No hidden state: forward(params, tokens).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "lib/core/json_fields.h"
#include "lib/core/tensor_tree.h"
#include "lib/model/sequence_layout.h"

namespace magic {

// Every LayerNorm of the model (blocks and final) uses this epsilon; named so that the exported
// plan (lib/train/plan_export.h) states the value the forward uses, not a copy of it.
constexpr double kLayerNormEps = 1e-5;

struct GptConfig {
  int64_t vocab = 257;
  int64_t d_model = 32;
  int64_t n_layers = 2;
  int64_t n_heads = 2;
  int64_t max_len = 64;
  // Attention logits are q·k times this; 0 means the standard 1/sqrt(head_dim). Set in code only
  // (not read from JSON): muP-style 1/head_dim, or a planted wrong scale in tests. Finite, >= 0.
  double attention_scale = 0.0;

  // Reads {"vocab", "d_model", "n_layers", "n_heads", "max_len"}; validates every field.
  static GptConfig from_json(const JsonFields& fields);
  void validate(const std::string& where) const;
};

// The factor attention logits are q·k times: `attention_scale`, or 1/sqrt(d_model / n_heads) when it is 0.
double attention_scale_of(const GptConfig& config);

// GPT-2 style init from one seed: N(0, 0.02) weights, output projections scaled by
// 1/sqrt(2 n_layers), zero biases, unit LayerNorm gains.
TensorTree gpt_init(const GptConfig& config, c10::ScalarType dtype, uint64_t seed);

// logits [B, T, vocab] for input_ids [B, T] (T <= max_len); position p attends to 0..p.
at::Tensor gpt_forward(const GptConfig& config, const TensorTree& params, const at::Tensor& input_ids);
// The same for the columns of `layout` (input_ids [B, T_local]): a query at position p attends
// to the gathered keys at positions <= p. Position ids beyond max_len (padding) embed as max_len - 1.
at::Tensor gpt_forward(const GptConfig& config, const TensorTree& params, const at::Tensor& input_ids,
                       const SequenceLayout& layout);

}  // namespace magic
