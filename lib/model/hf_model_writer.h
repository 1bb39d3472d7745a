// Writes a model in the Hugging Face folder layout that hf_model_folder.h reads: config.json (the
// architecture's own keys) and model.safetensors (their_weights). For models trained here (the
// demonstration's pretraining) and for test folders of random weights; the tokenizer files are
// the caller's to place beside them.
#pragma once

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <string>

#include "lib/model/hf_model_folder.h"

namespace magic {

// config.json's content for `model` (model_type gpt2 or gpt_neox), with `eos_token_id` as the
// end-of-text id of its tokenizer.
nlohmann::json model_folder_config(const ModelFolder& model, int64_t eos_token_id);

// The architecture of EleutherAI's Pythia-14m (GPT-NeoX: 6 layers, d 128, 4 heads, vocab 50304,
// rotary on a quarter of each head, parallel residual, exact GELU, untied head, 2048 positions),
// without weights: for test and bench folders of its size.
ModelFolder pythia_14m_shape();

// Creates `folder` if needed and writes config.json and model.safetensors (weights in `dtype`),
// each through a temporary file renamed into place. InputError for an architecture the reader
// would refuse.
void save_model_folder(const std::string& folder, const ModelFolder& model, int64_t eos_token_id,
                       c10::ScalarType dtype = at::kFloat);

}  // namespace magic
