// A model folder in the Hugging Face layout: config.json plus model.safetensors (or shards named
// by model.safetensors.index.json). Two architectures, read from their published definitions:
//   gpt2      Conv1D weights stored [in, out], fused c_attn (q | k | v), learned positions,
//             tanh GELU ("gelu_new"), lm_head tied to wte
//   gpt_neox  fused query_key_value laid out per head (h: q_h | k_h | v_h), rotary positions on
//             the first rotary_pct of each head, parallel residual, exact GELU, untied embed_out
// The weights are turned into the built-in model's names and layouts (gpt.h), so every part of the
// pipeline (sharding, checks, records) sees one model:
//   gpt2:     wte -> tok_emb, wpe -> pos_emb, h.l.ln_1 -> blocks.l.ln1, c_attn.weightᵀ -> attn.qkv,
//             attn.c_proj.weightᵀ -> attn.proj, ln_2 -> ln2, c_fc.weightᵀ -> mlp.fc,
//             mlp.c_proj.weightᵀ -> mlp.proj, ln_f -> ln_f
//   gpt_neox: embed_in -> tok_emb, layers.l.input_layernorm -> ln1, query_key_value rows regrouped
//             (h, part, i) -> (part, h, i) -> attn.qkv, attention.dense -> attn.proj,
//             post_attention_layernorm -> ln2, dense_h_to_4h -> mlp.fc, dense_4h_to_h -> mlp.proj,
//             final_layer_norm -> ln_f, embed_out -> head.weight
// Names may carry the architecture's prefix (transformer., gpt_neox.) or not; buffers (attn.bias,
// masked_bias, rotary_emb.inv_freq) are ignored. Anything else unknown is refused, never guessed.
#pragma once

#include <string>

#include "lib/core/tensor_tree.h"
#include "lib/model/gpt.h"

namespace magic {

struct ModelFolder {
  std::string model_type;  // "gpt2" or "gpt_neox"
  int64_t positions = 0;   // the positions the model was built for (n_positions, max_position_embeddings)
  GptConfig config;        // config.max_len: the run's sequence length, at most `positions`
  TensorTree params;       // the built-in model's names and layouts, in the dtype asked for
};

// config.json alone: the architecture, for estimates made before the weights are read.
// `sequence_length` is the run's (0: the model's positions); a learned position table keeps its
// first sequence_length rows, the only ones a sequence that long reads. InputError naming the
// file and key for a missing or unknown model_type, a missing size, an option we do not
// implement, or a sequence longer than the model's positions.
ModelFolder read_model_config(const std::string& folder, int64_t sequence_length = 0);

// The inverse of map_model_weights: `model.params` in the folder's names (body prefixed, as
// transformers saves them) and layouts. A GPT-2 position table is written as it is: its rows
// are the model's positions (save_model_folder writes n_positions to match).
TensorTree their_weights(const ModelFolder& model);

// config.json and the weights, converted to `dtype`. InputError naming the file and tensor for a
// missing, misshaped, unknown, non-floating or non-finite tensor, or a damaged file.
ModelFolder load_model_folder(const std::string& folder, c10::ScalarType dtype, int64_t sequence_length = 0);

// `theirs` (tensors named as in the folder's files) in our names and layouts, in `dtype`, checked
// as load_model_folder checks them (`source` names them in errors). Differentiable: a gradient
// with respect to our parameters flows back to `theirs` (the architecture oracle's test uses it).
TensorTree map_model_weights(const ModelFolder& model, const TensorTree& theirs, c10::ScalarType dtype,
                             const std::string& source);

}  // namespace magic
