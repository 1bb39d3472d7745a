// A GPT-style causal language model as a pure function of a parameter tree: token embeddings,
// learned positions or rotary ones, pre-LayerNorm blocks (causal multi-head self-attention, MLP
// d -> 4d -> d with GELU; sequential or parallel residual), final LayerNorm, LM head untied or
// tied to the token embeddings. No hidden state: forward(params, tokens). The built-in model uses
// the defaults; GPT-2 and GPT-NeoX folders set the rest (hf_model_folder.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lib/core/json_fields.h"
#include "lib/core/tensor_tree.h"
#include "lib/model/model_layout.h"
#include "lib/model/parallel_plan.h"

namespace magic {

enum class Positions { kLearned, kRotary };
enum class Activation { kGeluErf, kGeluTanh };

struct GptConfig {
  int64_t vocab = 257;
  int64_t d_model = 32;
  int64_t n_layers = 2;
  int64_t n_heads = 2;
  int64_t max_len = 64;
  // Attention logits are q·k times this; 0 means the standard 1/sqrt(head_dim). Set in code only
  // (not read from JSON): muP-style 1/head_dim, or a planted wrong scale in tests. Finite, >= 0.
  double attention_scale = 0.0;

  // Set by a model folder (not read from the built-in model's JSON):
  // learned: pos_emb [max_len, d] added to the input; rotary: q and k of each head turned by the
  // angle p·θ_i on their first rotary_dims dimensions (pairs i, i + rotary_dims/2), GPT-NeoX's
  //   θ_i = rotary_base^(−2i/rotary_dims),  x' = x·cos + rotate_half(x)·sin
  Positions positions = Positions::kLearned;
  int64_t rotary_dims = 0;
  double rotary_base = 10000.0;
  // x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX) instead of two residual steps.
  bool parallel_residual = false;
  // logits = ln_f(x)·tok_embᵀ, no head.weight (GPT-2).
  bool tied_head = false;
  Activation activation = Activation::kGeluErf;
  // Every LayerNorm (blocks and final).
  double layer_norm_eps = 1e-5;

  // Reads {"vocab", "d_model", "n_layers", "n_heads", "max_len"}; validates every field.
  static GptConfig from_json(const JsonFields& fields);
  void validate(const std::string& where) const;
};

// The factor attention logits are q·k times: `attention_scale`, or 1/sqrt(d_model / n_heads) when it is 0.
double attention_scale_of(const GptConfig& config);
// The query blocks causal attention splits `columns` in-order columns into (keys_in_order): block
// [b, e) reads keys [0, e) only, (n + 1)/2n of the T x T work for n blocks.
int64_t causal_blocks(int64_t columns);

// GPT-2 style init from one seed: N(0, 0.02) weights, output projections scaled by
// 1/sqrt(2 n_layers), zero biases, unit LayerNorm gains. Its names and shapes are the model's
// parameters (no pos_emb with rotary positions, no head.weight with a tied head).
TensorTree gpt_init(const GptConfig& config, c10::ScalarType dtype, uint64_t seed);

// gpt_init's element count without building it (a memory estimate must not allocate what it is
// about to refuse): V·d + [learned] T·d + L·(12·d² + 13·d) + 2·d + [untied] V·d, where each
// tensor's first dimension counts ⌈rows/fsdp⌉ (one rank's shard). In double: sizes a config
// may ask for overflow int64.
double gpt_parameter_count(const GptConfig& config, int64_t fsdp = 1);

// logits [B, T, vocab] for input_ids [B, T] (T <= max_len); position p attends to 0..p.
// `prefix` [B, k, d_model], when given, replaces the token embeddings of the first k columns (a
// multimodal encoder's outputs: patch_encoder.h); positions are added to it as to any column.
at::Tensor gpt_forward(const GptConfig& config, const TensorTree& params, const at::Tensor& input_ids,
                       const at::Tensor& prefix = {});
// The same for the columns of `layout.sequence` (input_ids [B, T_local]): a query at position p
// attends to the gathered keys at positions <= p. Position ids beyond max_len (padding) embed as
// max_len - 1. With tensor parallelism (layout.tensor) `params` are this rank's pieces
// (gpt_parallel_plan) and the logits its padded vocabulary shard [B, T_local, ceil(V/tp)]
// (vocab_parallel_loss.h takes them from there). `prefix` [B, k, d_model] replaces the first k
// local columns' token embeddings (the columns at positions below the prefix length come first in
// any layout's order); not with sequence parallelism.
// A pipeline chunk (layout.stage) runs its layers only: a chunk that does not embed takes the
// previous chunk's hidden states [B, T_local, d] as `input`, one without the head returns its own
// (before the final LayerNorm); `params` need hold only the chunk's (gpt_stage_parameters).
at::Tensor gpt_forward(const GptConfig& config, const TensorTree& params, const at::Tensor& input,
                       const ModelLayout& layout, const at::Tensor& prefix = {});

// Whether the parameter `name` of the model is used by pipeline chunk `stage`: the embeddings by
// the first, a block's by the chunk of its layer, the final LayerNorm and head by the last, and
// with a tied head the token embedding by the last as well (its copy of the first's).
bool gpt_stage_uses(const GptConfig& config, const PipelineStage& stage, const std::string& name);
// The entries of `params` that any of `chunks` uses, in `params`' order.
TensorTree gpt_stage_parameters(const GptConfig& config, const std::vector<PipelineStage>& chunks,
                                const TensorTree& params);

// Megatron's split of the model across tp ranks: qkv column-parallel by heads (each of q, k, v),
// attention and MLP output projections row-parallel (their biases replicated, added once after
// the reduction), the MLP's first linear column-parallel, the token embedding and LM head
// vocabulary-parallel; layer norms and learned positions replicated.
const ParallelPlan& gpt_parallel_plan();
// InputError naming `what` unless tp ranks can split the model: tp must divide n_heads.
void validate_tensor_parallel(const GptConfig& config, int64_t tp, const std::string& what);

}  // namespace magic
