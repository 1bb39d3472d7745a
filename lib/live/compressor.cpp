#include "lib/live/compressor.h"

#include <cmath>
#include <limits>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"

namespace magic {
namespace {

using nlohmann::json;

const std::map<std::string, Compressor>& compressors_by_name() {
  static const std::map<std::string, Compressor> names = {
      {"none", Compressor::kNone}, {"stats", Compressor::kStats},
      {"tile", Compressor::kTile}, {"projection", Compressor::kProjection},
      {"top", Compressor::kTop},   {"empty", Compressor::kEmpty}};
  return names;
}

// A number, or null where JSON has none (NaN, infinities).
json number(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}

// The tensor's values as a contiguous fp64 or fp32 CPU tensor (no copy when it is one already).
at::Tensor readable(const at::Tensor& t) {
  at::Tensor x = t.detach();
  if (x.scalar_type() != at::kDouble && x.scalar_type() != at::kFloat) x = x.to(at::kDouble);
  return x.to(at::kCPU).contiguous();
}

struct Moments {
  int64_t count = 0, nan = 0, inf = 0;
  double min = 0, max = 0, shift = 0, sum = 0, sum_sq = 0, raw_sq = 0;
};

// One pass over the finite entries. The variance uses sums shifted by the first finite entry, so
// a large mean does not cancel it away: var = (Σ(x-s)² - (Σ(x-s))²/n) / n.
template <typename T>
Moments moments_of(const T* p, int64_t n) {
  Moments m;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(p[i]);
    if (std::isnan(x)) {
      ++m.nan;
      continue;
    }
    if (std::isinf(x)) {
      ++m.inf;
      continue;
    }
    if (m.count == 0) m.min = m.max = m.shift = x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
    const double d = x - m.shift;
    m.sum += d;
    m.sum_sq += d * d;
    m.raw_sq += x * x;
    ++m.count;
  }
  return m;
}

json stats(const at::Tensor& t) {
  const at::Tensor x = readable(t);
  const Moments m = x.scalar_type() == at::kDouble ? moments_of(x.data_ptr<double>(), x.numel())
                                                   : moments_of(x.data_ptr<float>(), x.numel());
  json out = {{"count", m.count}, {"nan", m.nan}, {"inf", m.inf}};
  if (m.count == 0) {
    for (const char* k : {"min", "max", "mean", "std", "norm"}) out[k] = nullptr;
    return out;
  }
  const double n = static_cast<double>(m.count);
  const double variance = std::max(0.0, (m.sum_sq - m.sum * m.sum / n) / n);
  out["min"] = m.min;
  out["max"] = m.max;
  out["mean"] = m.shift + m.sum / n;
  out["std"] = std::sqrt(variance);
  out["norm"] = number(std::sqrt(m.raw_sq));
  return out;
}

json first_values(const at::Tensor& flat, int64_t cap) {
  const int64_t n = std::min(cap, flat.numel());
  const at::Tensor head = flat.slice(0, 0, n).to(at::kDouble).contiguous();
  const double* p = head.data_ptr<double>();
  json values = json::array();
  for (int64_t i = 0; i < n; ++i) values.push_back(number(p[i]));
  return values;
}

json none(const CompressorSpec& spec, const at::Tensor& t) {
  const at::Tensor flat = t.detach().to(at::kCPU).reshape({-1});
  return {{"values", first_values(flat, spec.max_elements)}, {"truncated", flat.numel() > spec.max_elements}};
}

// The tensor as a matrix: its last dimension the columns, the others folded into rows.
at::Tensor as_matrix(const at::Tensor& t) {
  if (t.dim() == 0) return t.reshape({1, 1});
  if (t.dim() == 1) return t.reshape({1, -1});
  return t.reshape({-1, t.size(-1)});
}

// Tile i of `tiles` along a length-`n` side covers [i·n/tiles, (i+1)·n/tiles).
int64_t tile_edge(int64_t i, int64_t n, int64_t tiles) {
  return i * n / tiles;
}

json tile(const CompressorSpec& spec, const at::Tensor& t) {
  const at::Tensor m = as_matrix(readable(t).to(at::kDouble)).contiguous();
  const int64_t rows = m.size(0), cols = m.size(1);
  const int64_t gr = std::max<int64_t>(1, std::min(spec.grid_rows, rows));
  const int64_t gc = std::max<int64_t>(1, std::min(spec.grid_cols, cols));
  json means = json::array(), maxima = json::array();
  const double* p = m.data_ptr<double>();
  for (int64_t i = 0; i < gr; ++i) {
    for (int64_t j = 0; j < gc; ++j) {
      double sum = 0, max = -std::numeric_limits<double>::infinity();
      int64_t count = 0;
      bool nan = false;
      for (int64_t r = tile_edge(i, rows, gr); r < tile_edge(i + 1, rows, gr); ++r) {
        for (int64_t c = tile_edge(j, cols, gc); c < tile_edge(j + 1, cols, gc); ++c) {
          const double x = p[r * cols + c];
          nan = nan || std::isnan(x);
          sum += x;
          max = std::max(max, x);
          ++count;
        }
      }
      means.push_back(nan || count == 0 ? json(nullptr) : number(sum / static_cast<double>(count)));
      maxima.push_back(nan || count == 0 ? json(nullptr) : number(max));
    }
  }
  return {{"rows", rows}, {"cols", cols}, {"grid", {gr, gc}}, {"mean", means}, {"max", maxima}};
}

json indexed(const at::Tensor& values, const at::Tensor& indices) {
  json index = json::array(), value = json::array();
  const at::Tensor v = values.to(at::kDouble).contiguous();
  const at::Tensor ix = indices.to(at::kLong).contiguous();
  for (int64_t i = 0; i < v.numel(); ++i) {
    index.push_back(ix.data_ptr<int64_t>()[i]);
    value.push_back(number(v.data_ptr<double>()[i]));
  }
  return {{"index", index}, {"value", value}};
}

json top(const CompressorSpec& spec, const at::Tensor& t) {
  const at::Tensor flat = readable(t).to(at::kDouble).reshape({-1});
  const int64_t k = std::min(spec.k, flat.numel());
  // How many entries of the whole tensor are of each sign: a reader of the k largest learns
  // whether they are all positive (for scores: whether that many examples raise the loss).
  const json signs = {{"positive", (flat > 0).sum().item<int64_t>()}, {"negative", (flat < 0).sum().item<int64_t>()}};
  json out;
  if (k == 0) {
    out = {{"largest", indexed(flat, flat.to(at::kLong))}, {"smallest", indexed(flat, flat.to(at::kLong))}};
  } else {
    const auto [large, large_at] = flat.topk(k, 0, /*largest=*/true, /*sorted=*/true);
    const auto [small, small_at] = flat.topk(k, 0, /*largest=*/false, /*sorted=*/true);
    out = {{"largest", indexed(large, large_at)}, {"smallest", indexed(small, small_at)}};
  }
  out.update(signs);
  return out;
}

json projection(const at::Tensor& t, const std::string& layer, const ProjectionVectors* vectors) {
  const at::Tensor* v = vectors ? vectors->find(layer) : nullptr;
  if (v == nullptr) return {{"note", "no vector"}};
  if (t.dim() == 0 || t.size(-1) != v->numel()) {
    return {{"note", str_cat("the vector of ", layer, " has ", v->numel(), " entries; the tensor's last dimension ",
                             t.dim() == 0 ? 0 : t.size(-1))}};
  }
  // p_i = x_i · v, one per row (a token's hidden state), v a unit vector.
  const at::Tensor p = at::matmul(as_matrix(readable(t).to(at::kDouble)), *v);
  return {
      {"vector", layer}, {"mean", number(p.mean().item<double>())}, {"values", first_values(p, kMaxProjectionValues)}};
}

}  // namespace

std::optional<Compressor> parse_compressor(const std::string& name) {
  const auto it = compressors_by_name().find(name);
  if (it == compressors_by_name().end()) return std::nullopt;
  return it->second;
}

std::string compressor_name(Compressor c) {
  for (const auto& [name, value] : compressors_by_name()) {
    if (value == c) return name;
  }
  return "?";
}

std::string compressor_names() {
  return "none, stats, tile, projection, top, empty";
}

ProjectionVectors::ProjectionVectors(const std::map<std::string, at::Tensor>& vectors) {
  for (const auto& [layer, v] : vectors) {
    const at::Tensor d = v.detach().to(at::kCPU).to(at::kDouble).reshape({-1}).contiguous();
    units_[layer] = d / d.norm();
  }
}

ProjectionVectors ProjectionVectors::load(const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  std::map<std::string, at::Tensor> vectors;
  for (const auto& e : file.tensors) {
    if (e.tensor.dim() != 1 || !at::isFloatingType(e.tensor.scalar_type())) {
      throw InputError(str_cat(path, ": ", e.name, ": expected a 1-D floating vector (one per layer)"));
    }
    const double norm = e.tensor.to(at::kDouble).norm().item<double>();
    if (!std::isfinite(norm) || norm == 0) {
      throw InputError(str_cat(path, ": ", e.name, ": expected a finite, non-zero vector"));
    }
    vectors[e.name] = e.tensor;
  }
  if (vectors.empty()) throw InputError(path + ": expected at least one vector (one per layer)");
  return ProjectionVectors(vectors);
}

const at::Tensor* ProjectionVectors::find(const std::string& layer) const {
  const auto it = units_.find(layer);
  return it == units_.end() ? nullptr : &it->second;
}

nlohmann::json compress(const CompressorSpec& spec, const at::Tensor& tensor, const std::string& layer,
                        const ProjectionVectors* vectors) {
  at::NoGradGuard no_grad;
  switch (spec.kind) {
    case Compressor::kNone:
      return none(spec, tensor);
    case Compressor::kStats:
      return stats(tensor);
    case Compressor::kTile:
      return tile(spec, tensor);
    case Compressor::kProjection:
      return projection(tensor, layer, vectors);
    case Compressor::kTop:
      return top(spec, tensor);
    case Compressor::kEmpty:
      return json::object();
  }
  return json::object();
}

}  // namespace magic
