#include "lib/model/gpt_init_file.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"

namespace magic {
namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::vector<std::string> dims;
  for (int64_t s : sizes) dims.push_back(std::to_string(s));
  return "[" + join(dims, ", ") + "]";
}

std::string model_text(const GptConfig& c) {
  return str_cat("vocab ", c.vocab, ", d_model ", c.d_model, ", n_layers ", c.n_layers, ", max_len ", c.max_len);
}

}  // namespace

TensorTree load_gpt_init(const std::string& path, const GptConfig& config, c10::ScalarType dtype) {
  const SafetensorsFile file = load_safetensors(path);
  // The names and shapes gpt_init makes are the contract; its values are not used.
  const TensorTree expected = gpt_init(config, at::kDouble, 0);
  for (const auto& entry : file.tensors) {
    if (!expected.contains(entry.name)) {
      throw InputError(str_cat(path, ": tensor '", entry.name, "' is not a parameter of the model (",
                               model_text(config), "; parameters: ", join(expected.names(), ", "), ")"));
    }
  }
  TensorTree params;
  for (const auto& p : expected) {
    if (!file.tensors.contains(p.name)) {
      throw InputError(str_cat(path, ": no tensor '", p.name, "' (the model ", model_text(config), " has ",
                               expected.size(),
                               " parameters; docs/magic-run.md, 'Initial weights from elsewhere', lists them)"));
    }
    const at::Tensor& t = file.tensors.at(p.name);
    if (!t.sizes().equals(p.tensor.sizes())) {
      throw InputError(str_cat(path, ": tensor '", p.name, "' has shape ", shape_text(t.sizes()), ", expected ",
                               shape_text(p.tensor.sizes()), " for the model ", model_text(config)));
    }
    if (!at::isFloatingType(t.scalar_type())) {
      throw InputError(str_cat(path, ": tensor '", p.name, "' is ", t.scalar_type(), "; expected a floating dtype"));
    }
    if (!t.isfinite().all().item<bool>()) {
      throw InputError(str_cat(path, ": tensor '", p.name, "' has values that are not finite"));
    }
    params.insert(p.name, t.to(dtype).contiguous().clone());
  }
  return params;
}

}  // namespace magic
