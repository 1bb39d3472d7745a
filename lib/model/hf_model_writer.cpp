#include "lib/model/hf_model_writer.h"

#include <filesystem>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/atomic_file.h"
#include "lib/io/safetensors.h"

namespace magic {

nlohmann::json model_folder_config(const ModelFolder& m, int64_t eos_token_id) {
  const GptConfig& c = m.config;
  const bool tanh = c.activation == Activation::kGeluTanh;
  if (m.model_type == "gpt2") {
    if (c.positions != Positions::kLearned || c.parallel_residual || !tanh) {
      throw InputError("save_model_folder: a gpt2 folder has learned positions, a serial residual and tanh GELU");
    }
    return {{"model_type", "gpt2"},
            {"architectures", {"GPT2LMHeadModel"}},
            {"vocab_size", c.vocab},
            {"n_embd", c.d_model},
            {"n_layer", c.n_layers},
            {"n_head", c.n_heads},
            {"n_positions", c.max_len},  // the table holds the run's rows (their_weights)
            {"n_inner", nullptr},
            {"activation_function", "gelu_new"},
            {"layer_norm_epsilon", c.layer_norm_eps},
            {"tie_word_embeddings", c.tied_head},
            {"bos_token_id", eos_token_id},
            {"eos_token_id", eos_token_id}};
  }
  if (m.model_type == "gpt_neox") {
    if (c.positions != Positions::kRotary)
      throw InputError("save_model_folder: a gpt_neox folder has rotary positions");
    const double head_dim = static_cast<double>(c.d_model / c.n_heads);
    return {{"model_type", "gpt_neox"},
            {"architectures", {"GPTNeoXForCausalLM"}},
            {"vocab_size", c.vocab},
            {"hidden_size", c.d_model},
            {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads},
            {"intermediate_size", 4 * c.d_model},
            {"max_position_embeddings", m.positions},
            {"rotary_pct", static_cast<double>(c.rotary_dims) / head_dim},
            {"rotary_emb_base", c.rotary_base},
            {"layer_norm_eps", c.layer_norm_eps},
            {"use_parallel_residual", c.parallel_residual},
            {"hidden_act", tanh ? "gelu_new" : "gelu"},
            {"tie_word_embeddings", c.tied_head},
            {"bos_token_id", eos_token_id},
            {"eos_token_id", eos_token_id}};
  }
  throw InputError(str_cat("save_model_folder: model_type '", m.model_type, "' (expected gpt2 or gpt_neox)"));
}

ModelFolder pythia_14m_shape() {
  ModelFolder m;
  m.model_type = "gpt_neox";
  m.positions = 2048;
  GptConfig& c = m.config;
  c.vocab = 50304;
  c.d_model = 128;
  c.n_layers = 6;
  c.n_heads = 4;
  c.max_len = m.positions;
  c.positions = Positions::kRotary;
  c.rotary_dims = 8;  // int(32 * 0.25)
  c.parallel_residual = true;
  c.tied_head = false;
  c.activation = Activation::kGeluErf;
  return m;
}

void save_model_folder(const std::string& folder, const ModelFolder& m, int64_t eos_token_id, c10::ScalarType dtype) {
  const nlohmann::json config = model_folder_config(m, eos_token_id);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw InputError(str_cat(folder, ": cannot create the model folder (", ec.message(), ")"));
  TensorTree weights = their_weights(m).map([dtype](const at::Tensor& t) { return t.detach().to(dtype); });
  save_safetensors(folder + "/model.safetensors", weights, {{"format", "pt"}});
  write_file_atomically(folder + "/config.json", config.dump(2) + "\n");
}

}  // namespace magic
