#include "lib/model/hf_model_folder.h"

#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "lib/core/error.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Typed reads of config.json, whose other keys (many, and growing with each transformers
// release) are not ours to refuse.
class ConfigKeys {
 public:
  ConfigKeys(json doc, std::string path) : doc_(std::move(doc)), path_(std::move(path)) {}

  bool has(const std::string& key) const { return doc_.contains(key) && !doc_[key].is_null(); }
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw InputError(str_cat(path_, ": ", key, ": ", why));
  }
  int64_t size(const std::string& key) const {
    if (!has(key)) fail(key, "missing (expected an integer >= 1)");
    if (!doc_[key].is_number_integer() || doc_[key].get<int64_t>() < 1) fail(key, "expected an integer >= 1");
    return doc_[key].get<int64_t>();
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_number()) fail(key, "expected a number");
    return doc_[key].get<double>();
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_boolean()) fail(key, "expected true or false");
    return doc_[key].get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_string()) fail(key, "expected a string");
    return doc_[key].get<std::string>();
  }
  // A boolean option whose other value we do not implement.
  void require(const std::string& key, bool fallback, bool supported) const {
    if (flag(key, fallback) != supported) fail(key, str_cat(supported ? "false" : "true", " is not supported"));
  }

 private:
  json doc_;
  std::string path_;
};

// The transformers names of the two GELU forms (gelu_fast is the tanh form written differently).
Activation activation(const ConfigKeys& k, const std::string& key, const std::string& fallback) {
  const std::string name = k.text(key, fallback);
  if (name == "gelu") return Activation::kGeluErf;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::kGeluTanh;
  k.fail(key, str_cat("'", name, "' is not supported (expected gelu, or gelu_new for the tanh form)"));
}

// The keys an architecture names its sizes by: vocab, width, layers, heads, positions.
struct SizeKeys {
  const char *vocab, *d_model, *n_layers, *n_heads, *positions;
};

GptConfig sizes(const ConfigKeys& k, const SizeKeys& keys) {
  GptConfig c;
  c.vocab = k.size(keys.vocab);
  c.d_model = k.size(keys.d_model);
  c.n_layers = k.size(keys.n_layers);
  c.n_heads = k.size(keys.n_heads);
  c.max_len = k.size(keys.positions);
  return c;
}

GptConfig gpt2_config(const ConfigKeys& k) {
  GptConfig c = sizes(k, {"vocab_size", "n_embd", "n_layer", "n_head", "n_positions"});
  c.layer_norm_eps = k.number("layer_norm_epsilon", 1e-5);
  c.activation = activation(k, "activation_function", "gelu_new");
  if (k.has("n_inner") && k.size("n_inner") != 4 * c.d_model) {
    k.fail("n_inner", str_cat("only 4 x n_embd = ", 4 * c.d_model, " is supported"));
  }
  k.require("scale_attn_weights", true, true);
  k.require("scale_attn_by_inverse_layer_idx", false, false);
  k.require("add_cross_attention", false, false);
  c.tied_head = k.flag("tie_word_embeddings", true);
  return c;
}

GptConfig neox_config(const ConfigKeys& k) {
  GptConfig c =
      sizes(k, {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings"});
  if (k.size("intermediate_size") != 4 * c.d_model) {
    k.fail("intermediate_size", str_cat("only 4 x hidden_size = ", 4 * c.d_model, " is supported"));
  }
  if (k.has("rope_scaling")) k.fail("rope_scaling", "not supported (expected null)");
  c.activation = activation(k, "hidden_act", "gelu");
  k.require("attention_bias", true, true);
  c.positions = Positions::kRotary;
  // Newer transformers releases name them partial_rotary_factor and rope_theta.
  const std::string pct_key = k.has("partial_rotary_factor") ? "partial_rotary_factor" : "rotary_pct";
  const double pct = k.number(pct_key, 0.25);
  if (!(pct > 0.0 && pct <= 1.0)) k.fail(pct_key, "expected a number in (0, 1]");
  const int64_t head_dim = c.d_model / c.n_heads;
  c.rotary_dims = static_cast<int64_t>(static_cast<double>(head_dim) * pct);  // as int(head_size * rotary_pct)
  const std::string base_key = k.has("rope_theta") ? "rope_theta" : "rotary_emb_base";
  c.rotary_base = k.number(base_key, 10000.0);
  c.layer_norm_eps = k.number("layer_norm_eps", 1e-5);
  c.parallel_residual = k.flag("use_parallel_residual", true);
  c.tied_head = k.flag("tie_word_embeddings", false);
  return c;
}

// One of our parameters and where it comes from in the folder.
struct Source {
  std::string ours, theirs;
  std::function<at::Tensor(const at::Tensor&)> transform;  // their layout -> ours
  std::vector<int64_t> their_shape;
  std::function<at::Tensor(const at::Tensor&)> inverse;  // ours -> their layout
};

at::Tensor as_is(const at::Tensor& t) {
  return t;
}
at::Tensor transposed(const at::Tensor& t) {
  return t.t();
}

std::vector<Source> gpt2_sources(const GptConfig& c, int64_t positions) {
  const int64_t d = c.d_model, V = c.vocab, T = c.max_len;
  auto first_rows = [T](const at::Tensor& t) { return t.narrow(0, 0, T); };
  // A written folder's table has exactly the run's rows (save_model_folder sets n_positions so).
  std::vector<Source> s = {{"tok_emb", "wte.weight", as_is, {V, d}, as_is},
                           {"pos_emb", "wpe.weight", first_rows, {positions, d}, as_is}};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string ours = str_cat("blocks.", l, "."), theirs = str_cat("h.", l, ".");
    auto add = [&](const std::string& a, const std::string& b, auto fn, std::vector<int64_t> shape) {
      s.push_back({ours + a, theirs + b, fn, std::move(shape), fn});  // as_is and ᵀ are their own inverses
    };
    add("ln1.weight", "ln_1.weight", as_is, {d});
    add("ln1.bias", "ln_1.bias", as_is, {d});
    add("attn.qkv.weight", "attn.c_attn.weight", transposed, {d, 3 * d});
    add("attn.qkv.bias", "attn.c_attn.bias", as_is, {3 * d});
    add("attn.proj.weight", "attn.c_proj.weight", transposed, {d, d});
    add("attn.proj.bias", "attn.c_proj.bias", as_is, {d});
    add("ln2.weight", "ln_2.weight", as_is, {d});
    add("ln2.bias", "ln_2.bias", as_is, {d});
    add("mlp.fc.weight", "mlp.c_fc.weight", transposed, {d, 4 * d});
    add("mlp.fc.bias", "mlp.c_fc.bias", as_is, {4 * d});
    add("mlp.proj.weight", "mlp.c_proj.weight", transposed, {4 * d, d});
    add("mlp.proj.bias", "mlp.c_proj.bias", as_is, {d});
  }
  s.push_back({"ln_f.weight", "ln_f.weight", as_is, {d}, as_is});
  s.push_back({"ln_f.bias", "ln_f.bias", as_is, {d}, as_is});
  if (!c.tied_head) s.push_back({"head.weight", "lm_head.weight", as_is, {V, d}, as_is});
  return s;
}

std::vector<Source> neox_sources(const GptConfig& c) {
  const int64_t d = c.d_model, V = c.vocab, H = c.n_heads, D = d / H;
  // Rows (a, b, i) -> (b, a, i): their (head h, part j) to our (part j, head h), q, k and v each
  // contiguous as ours, with (first, second) = (H, 3); (3, H) is the way back.
  auto swap_row_groups = [](int64_t first, int64_t second, int64_t D) {
    return [first, second, D](const at::Tensor& t) {
      const std::vector<int64_t> rest(t.sizes().begin() + 1, t.sizes().end());
      std::vector<int64_t> grouped = {first, second, D};
      grouped.insert(grouped.end(), rest.begin(), rest.end());
      std::vector<int64_t> flat = {first * second * D};
      flat.insert(flat.end(), rest.begin(), rest.end());
      return t.reshape(grouped).transpose(0, 1).reshape(flat);
    };
  };
  const auto regroup = swap_row_groups(H, 3, D), ungroup = swap_row_groups(3, H, D);
  std::vector<Source> s = {{"tok_emb", "embed_in.weight", as_is, {V, d}, as_is}};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string ours = str_cat("blocks.", l, "."), theirs = str_cat("layers.", l, ".");
    auto add = [&](const std::string& a, const std::string& b, auto fn, std::vector<int64_t> shape,
                   std::function<at::Tensor(const at::Tensor&)> inverse = as_is) {
      s.push_back({ours + a, theirs + b, fn, std::move(shape), std::move(inverse)});
    };
    add("ln1.weight", "input_layernorm.weight", as_is, {d});
    add("ln1.bias", "input_layernorm.bias", as_is, {d});
    add("attn.qkv.weight", "attention.query_key_value.weight", regroup, {3 * d, d}, ungroup);
    add("attn.qkv.bias", "attention.query_key_value.bias", regroup, {3 * d}, ungroup);
    add("attn.proj.weight", "attention.dense.weight", as_is, {d, d});
    add("attn.proj.bias", "attention.dense.bias", as_is, {d});
    add("ln2.weight", "post_attention_layernorm.weight", as_is, {d});
    add("ln2.bias", "post_attention_layernorm.bias", as_is, {d});
    add("mlp.fc.weight", "mlp.dense_h_to_4h.weight", as_is, {4 * d, d});
    add("mlp.fc.bias", "mlp.dense_h_to_4h.bias", as_is, {4 * d});
    add("mlp.proj.weight", "mlp.dense_4h_to_h.weight", as_is, {d, 4 * d});
    add("mlp.proj.bias", "mlp.dense_4h_to_h.bias", as_is, {d});
  }
  s.push_back({"ln_f.weight", "final_layer_norm.weight", as_is, {d}, as_is});
  s.push_back({"ln_f.bias", "final_layer_norm.bias", as_is, {d}, as_is});
  if (!c.tied_head) s.push_back({"head.weight", "embed_out.weight", as_is, {V, d}, as_is});
  return s;
}

// Buffers the published checkpoints carry that are not parameters.
bool is_buffer(const std::string& name) {
  for (const char* suffix :
       {".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq"}) {
    const std::string s = suffix;
    if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

// Every tensor of the folder's weight files, by name (one file, or the shards an index names).
std::map<std::string, at::Tensor> read_weights(const fs::path& dir) {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> file_of;
  auto read = [&](const fs::path& file) {
    for (const auto& e : load_safetensors(file.string()).tensors) {
      if (tensors.count(e.name)) {
        throw InputError(str_cat(file.string(), ": tensor '", e.name, "' is also in ", file_of[e.name]));
      }
      tensors.emplace(e.name, e.tensor);
      file_of.emplace(e.name, file.string());
    }
  };
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) {
    read(single);
  } else if (fs::exists(index)) {
    const json doc = read_json_file(index.string());
    if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) {
      throw InputError(index.string() + ": weight_map: expected an object of tensor name -> file");
    }
    std::set<std::string> files;
    for (const auto& [name, file] : doc["weight_map"].items()) {
      if (!file.is_string() || fs::path(file.get<std::string>()).has_parent_path() || file.get<std::string>().empty()) {
        throw InputError(str_cat(index.string(), ": weight_map['", name, "']: expected a file name in the folder"));
      }
      files.insert(file.get<std::string>());
    }
    for (const auto& file : files) read(dir / file);
    for (const auto& [name, file] : doc["weight_map"].items()) {
      if (!tensors.count(name)) {
        throw InputError(str_cat(index.string(), ": weight_map names '", name, "' in ", file.get<std::string>(),
                                 ", which does not hold it"));
      }
    }
  } else {
    throw InputError(dir.string() + ": no model.safetensors, nor model.safetensors.index.json");
  }
  return tensors;
}

std::string shape_text(at::IntArrayRef sizes) {
  std::vector<std::string> dims;
  for (int64_t s : sizes) dims.push_back(std::to_string(s));
  return "[" + join(dims, ", ") + "]";
}

}  // namespace

ModelFolder read_model_config(const std::string& folder, int64_t sequence_length) {
  if (!fs::is_directory(folder)) throw InputError(folder + ": not a folder (expected a model folder)");
  const std::string path = (fs::path(folder) / "config.json").string();
  if (!fs::exists(path)) throw InputError(path + ": missing (a model folder has config.json)");
  const json doc = read_json_file(path);
  if (!doc.is_object()) throw InputError(path + ": expected a JSON object");
  const ConfigKeys keys(doc, path);
  ModelFolder m;
  m.model_type = keys.text("model_type", "");
  if (m.model_type == "gpt2") {
    m.config = gpt2_config(keys);
  } else if (m.model_type == "gpt_neox") {
    m.config = neox_config(keys);
  } else {
    keys.fail("model_type", m.model_type.empty() ? "missing (expected gpt2 or gpt_neox)"
                                                 : str_cat("'", m.model_type,
                                                           "' is not supported (expected gpt2 "
                                                           "or gpt_neox)"));
  }
  m.positions = m.config.max_len;
  if (sequence_length > m.positions) {
    throw InputError(str_cat(path, ": the run's sequences of ", sequence_length, " tokens are longer than the ",
                             m.positions, " positions of this model (",
                             m.model_type == "gpt2" ? "n_positions" : "max_position_embeddings", ")"));
  }
  if (sequence_length > 0) m.config.max_len = sequence_length;
  m.config.validate(path);
  return m;
}

namespace {

std::vector<Source> sources_of(const ModelFolder& m) {
  return m.model_type == "gpt2" ? gpt2_sources(m.config, m.positions) : neox_sources(m.config);
}

std::string prefix_of(const ModelFolder& m) {
  return m.model_type == "gpt2" ? "transformer." : "gpt_neox.";
}

}  // namespace

TensorTree map_model_weights(const ModelFolder& m, const TensorTree& theirs, c10::ScalarType dtype,
                             const std::string& source) {
  const std::string prefix = prefix_of(m);
  const auto sources = sources_of(m);
  // Their names with the architecture's prefix taken off; heads keep theirs.
  std::map<std::string, std::string> bare;  // bare name -> name in the file
  for (const auto& e : theirs) {
    const bool prefixed = e.name.rfind(prefix, 0) == 0;
    const std::string key = prefixed ? e.name.substr(prefix.size()) : e.name;
    if (bare.count(key)) throw InputError(str_cat(source, ": both '", bare[key], "' and '", e.name, "' are present"));
    bare.emplace(key, e.name);
  }
  TensorTree params;
  std::set<std::string> used;
  for (const auto& s : sources) {
    auto it = bare.find(s.theirs);
    if (it == bare.end()) {
      throw InputError(str_cat(source, ": no tensor '", s.theirs, "' (", m.model_type, "'s ", s.ours, ", shape ",
                               shape_text(s.their_shape), ")"));
    }
    used.insert(it->second);
    const at::Tensor& t = theirs.at(it->second);
    if (!t.sizes().equals(s.their_shape)) {
      throw InputError(str_cat(source, ": tensor '", it->second, "' has shape ", shape_text(t.sizes()), ", expected ",
                               shape_text(s.their_shape), " from config.json"));
    }
    if (!at::isFloatingType(t.scalar_type())) {
      throw InputError(
          str_cat(source, ": tensor '", it->second, "' is ", t.scalar_type(), "; expected a floating dtype"));
    }
    if (!t.isfinite().all().item<bool>()) {
      throw InputError(str_cat(source, ": tensor '", it->second, "' has values that are not finite"));
    }
    params.insert(s.ours, s.transform(t.to(dtype)).contiguous().clone());
  }
  for (const auto& e : theirs) {
    if (used.count(e.name) || is_buffer(e.name)) continue;
    // A tied head's stored copy (some checkpoints keep lm_head.weight beside wte) is not read.
    if (m.config.tied_head && (e.name == "lm_head.weight" || e.name == "embed_out.weight")) continue;
    throw InputError(str_cat(source, ": tensor '", e.name, "' is not a parameter of a ", m.model_type,
                             " model with this config.json"));
  }
  return params;
}

TensorTree their_weights(const ModelFolder& m) {
  TensorTree theirs;
  for (const auto& s : sources_of(m)) {
    const bool is_head = s.ours == "head.weight";
    const std::string name = is_head ? s.theirs : prefix_of(m) + s.theirs;
    theirs.insert(name, s.inverse(m.params.at(s.ours)).contiguous());
  }
  return theirs;
}

ModelFolder load_model_folder(const std::string& folder, c10::ScalarType dtype, int64_t sequence_length) {
  ModelFolder m = read_model_config(folder, sequence_length);
  TensorTree theirs;
  for (const auto& [name, tensor] : read_weights(fs::path(folder))) theirs.insert(name, tensor);
  m.params = map_model_weights(m, theirs, dtype, folder);
  return m;
}

}  // namespace magic
