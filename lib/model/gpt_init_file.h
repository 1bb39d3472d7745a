// Initial GPT parameters from a safetensors file (magic-run's "model.init"), so a model trained
// elsewhere can be attributed. The file holds exactly the tensors gpt_init makes, by the same names
// and shapes (d = d_model, L = n_layers, V = vocab, T = max_len, l = 0..L-1):
//   tok_emb [V, d], pos_emb [T, d], head.weight [V, d], ln_f.weight [d], ln_f.bias [d],
//   blocks.l.ln1.weight/bias [d], blocks.l.attn.qkv.weight [3d, d], .qkv.bias [3d],
//   blocks.l.attn.proj.weight [d, d], .proj.bias [d], blocks.l.ln2.weight/bias [d],
//   blocks.l.mlp.fc.weight [4d, d], .fc.bias [4d], blocks.l.mlp.proj.weight [d, 4d], .proj.bias [d]
// in any floating dtype (converted to the run's master dtype). PyTorch writes one with
//   safetensors.torch.save_file({name: p for name, p in params.items()}, "init.safetensors").
#pragma once

#include <string>

#include "lib/model/gpt.h"

namespace magic {

// InputError naming the file and the tensor for a missing, extra, misshapen, non-floating or
// non-finite tensor.
TensorTree load_gpt_init(const std::string& path, const GptConfig& config, c10::ScalarType dtype);

}  // namespace magic
