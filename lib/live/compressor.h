// Compressors: what a traced tensor becomes before it leaves the rank (docs/tracer.md,
// "Compressors"). Each is a pure function of the tensor: it reads a detached copy and returns JSON
// data, so compressing changes nothing the run computes.
#pragma once

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace magic {

enum class Compressor { kNone, kStats, kTile, kProjection, kTop, kEmpty };

std::optional<Compressor> parse_compressor(const std::string& name);
std::string compressor_name(Compressor c);
// "none, stats, tile, projection, top, empty"
std::string compressor_names();

struct CompressorSpec {
  Compressor kind = Compressor::kStats;
  int64_t max_elements = 4096;  // kNone
  int64_t grid_rows = 32;       // kTile
  int64_t grid_cols = 32;
  int64_t k = 10;  // kTop
};

// Limits the control message checks (docs/tracer.md).
constexpr int64_t kMaxNoneElements = 65536;
constexpr int64_t kMaxGrid = 256;
constexpr int64_t kMaxTopK = 1000;
constexpr int64_t kMaxProjectionValues = 4096;

// One unit vector per layer name ("blocks.0"), read from a safetensors file: the directions
// `projection` projects a layer's hidden states onto.
class ProjectionVectors {
 public:
  ProjectionVectors() = default;
  // Throws InputError naming the file: unreadable, a tensor that is not a non-zero 1-D vector.
  static ProjectionVectors load(const std::string& path);
  explicit ProjectionVectors(const std::map<std::string, at::Tensor>& vectors);
  // The unit vector of `layer` (fp64), or nullptr.
  const at::Tensor* find(const std::string& layer) const;
  bool empty() const { return units_.empty(); }

 private:
  std::map<std::string, at::Tensor> units_;
};

// The `data` object of a record compressed by `spec` (docs/tracer.md's table). `layer` and
// `vectors` are read by kProjection only.
nlohmann::json compress(const CompressorSpec& spec, const at::Tensor& tensor, const std::string& layer = "",
                        const ProjectionVectors* vectors = nullptr);

}  // namespace magic
