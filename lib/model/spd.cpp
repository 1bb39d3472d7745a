#include "lib/model/spd.h"

#include <cmath>

#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/model/kernel_fallback.h"

namespace magic {
namespace {

std::string key(const char* prefix, int64_t site, const char* suffix = "") {
  return str_cat(prefix, ".", site, suffix);
}

at::Tensor normal(std::vector<int64_t> shape, double std, at::Generator& gen, c10::ScalarType dtype) {
  return at::normal(0.0, std, shape, gen, at::TensorOptions().dtype(at::kDouble)).to(dtype);
}

}  // namespace

const std::vector<SpdTerm>& spd_terms() {
  static const std::vector<SpdTerm> terms{SpdTerm::kFaithfulness, SpdTerm::kReconstruction, SpdTerm::kImportance,
                                          SpdTerm::kPpgd};
  return terms;
}

std::string spd_term_name(SpdTerm term) {
  switch (term) {
    case SpdTerm::kFaithfulness:
      return "faithfulness";
    case SpdTerm::kReconstruction:
      return "reconstruction";
    case SpdTerm::kImportance:
      return "importance";
    case SpdTerm::kPpgd:
      return "ppgd";
  }
  return "?";
}

SpdTermWeights SpdTermWeights::only(SpdTerm term) {
  SpdTermWeights w{0.0, 0.0, 0.0, 0.0};
  switch (term) {
    case SpdTerm::kFaithfulness:
      w.faithfulness = 1.0;
      break;
    case SpdTerm::kReconstruction:
      w.reconstruction = 1.0;
      break;
    case SpdTerm::kImportance:
      w.importance = 1.0;
      break;
    case SpdTerm::kPpgd:
      w.ppgd = 1.0;
      break;
  }
  return w;
}

std::vector<at::Tensor> spd_target_weights(const SpdConfig& c, c10::ScalarType dtype, uint64_t seed) {
  at::Generator gen = make_generator(derive_seed(seed, "spd-target"));
  std::vector<at::Tensor> weights;
  for (int64_t s = 0; s < c.n_sites; ++s) {
    weights.push_back(normal({c.width, c.width}, 1.0 / std::sqrt(static_cast<double>(c.width)), gen, dtype));
  }
  return weights;
}

at::Tensor spd_inputs(const SpdConfig& c, int64_t count, c10::ScalarType dtype, uint64_t seed,
                      const std::string& purpose) {
  at::Generator gen = make_generator(derive_seed(seed, purpose));
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor active = at::rand({count, c.width}, gen, opts) < c.feature_probability;
  return (at::rand({count, c.width}, gen, opts) * active.to(at::kDouble)).to(dtype);
}

std::vector<at::Tensor> spd_site_inputs(const std::vector<at::Tensor>& target, const at::Tensor& x) {
  std::vector<at::Tensor> inputs{x};
  for (size_t s = 0; s + 1 < target.size(); ++s) {
    inputs.push_back(kernels::relu(kernels::matmul(inputs.back(), target[s])));
  }
  return inputs;
}

TensorTree spd_init_ci(const SpdConfig& c, int64_t site, c10::ScalarType dtype, uint64_t seed) {
  at::Generator gen = make_generator(derive_seed(seed, "spd-ci", static_cast<uint64_t>(site)));
  TensorTree p;
  p.insert(key("ci", site, ".A"),
           normal({c.width, c.ci_hidden}, 1.0 / std::sqrt(static_cast<double>(c.width)), gen, dtype));
  p.insert(key("ci", site, ".b"), at::zeros({c.ci_hidden}, at::TensorOptions().dtype(dtype)));
  p.insert(key("ci", site, ".B"),
           normal({c.ci_hidden, c.components}, 1.0 / std::sqrt(static_cast<double>(c.ci_hidden)), gen, dtype));
  p.insert(key("ci", site, ".c"), at::zeros({c.components}, at::TensorOptions().dtype(dtype)));
  return p;
}

TensorTree spd_init_components(const SpdConfig& c, int64_t site, c10::ScalarType dtype, uint64_t seed) {
  at::Generator gen = make_generator(derive_seed(seed, "spd-components", static_cast<uint64_t>(site)));
  TensorTree p;
  p.insert(key("V", site), normal({c.width, c.components}, 1.0 / std::sqrt(static_cast<double>(c.width)), gen, dtype));
  p.insert(key("U", site),
           normal({c.components, c.width}, 1.0 / std::sqrt(static_cast<double>(c.components)), gen, dtype));
  return p;
}

TensorTree spd_init_sources(const SpdConfig& c, int64_t site, c10::ScalarType dtype) {
  TensorTree p;
  p.insert(key("a", site), at::full({c.components}, 0.5, at::TensorOptions().dtype(dtype)));
  return p;
}

SpdData spd_data(const SpdConfig& config, int64_t n_queries, c10::ScalarType dtype, uint64_t seed) {
  return {spd_target_weights(config, dtype, seed), spd_inputs(config, config.examples, dtype, seed, "spd-inputs"),
          spd_inputs(config, n_queries, dtype, seed, "spd-queries")};
}

TensorTree spd_init_params(const SpdConfig& config, c10::ScalarType dtype, uint64_t seed) {
  TensorTree params;
  for (int64_t s = 0; s < config.n_sites; ++s) params = merge(params, spd_init_ci(config, s, dtype, seed));
  for (int64_t s = 0; s < config.n_sites; ++s) params = merge(params, spd_init_components(config, s, dtype, seed));
  return params;
}

TensorTree spd_init_all_sources(const SpdConfig& config, c10::ScalarType dtype) {
  TensorTree sources;
  for (int64_t s = 0; s < config.n_sites; ++s) sources = merge(sources, spd_init_sources(config, s, dtype));
  return sources;
}

at::Tensor spd_gates(const TensorTree& p, int64_t site, const at::Tensor& x_site) {
  at::Tensor h = kernels::gelu(kernels::matmul(x_site, p.at(key("ci", site, ".A"))) + p.at(key("ci", site, ".b")));
  return kernels::sigmoid(kernels::matmul(h, p.at(key("ci", site, ".B"))) + p.at(key("ci", site, ".c")));
}

at::Tensor spd_masked_output(const TensorTree& p, int64_t site, const at::Tensor& x_site, const at::Tensor& mask) {
  return kernels::matmul(kernels::matmul(x_site, p.at(key("V", site))) * mask, p.at(key("U", site)));
}

at::Tensor spd_site_error(const at::Tensor& output, const at::Tensor& target) {
  return (output - target).pow(2).mean(-1);
}

at::Tensor spd_faithfulness(const TensorTree& p, int64_t site, const at::Tensor& weight) {
  return (weight - kernels::matmul(p.at(key("V", site)), p.at(key("U", site)))).pow(2).mean();
}

at::Tensor spd_importance_penalty(const at::Tensor& total, double beta) {
  return total + beta * total * at::log2(1.0 + total);
}

at::Tensor spd_sources_ascent(const at::Tensor& sources, const at::Tensor& grad, double step) {
  constexpr double kTie = 1e-9;
  const at::Tensor g = grad.detach();
  const at::Tensor decided = g.abs() > kTie * g.abs().max();
  return (sources + step * at::where(decided, g.sign(), at::zeros_like(g))).clamp(0.0, 1.0);
}

at::Tensor spd_stochastic_sources(uint64_t seed, int64_t step, const std::vector<int64_t>& rows, int64_t site,
                                  int64_t components, c10::ScalarType dtype) {
  at::Tensor u = at::empty({static_cast<int64_t>(rows.size()), components}, at::TensorOptions().dtype(at::kDouble));
  auto acc = u.accessor<double, 2>();
  const uint64_t base = derive_seed(seed, "spd-stochastic-sources", static_cast<uint64_t>(step));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t c = 0; c < components; ++c) {
      const uint64_t h =
          splitmix64(base ^ splitmix64(static_cast<uint64_t>(rows[i]) * 0x100000001B3ull +
                                       static_cast<uint64_t>(site) * 1315423911ull + static_cast<uint64_t>(c)));
      acc[i][c] = static_cast<double>(h >> 11) * 0x1.0p-53;
    }
  }
  return u.to(dtype);
}

}  // namespace magic
