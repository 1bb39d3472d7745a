// safetensors files: 8-byte little-endian header length, a JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the raw little-endian data. Readable by Python's safetensors and back.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "lib/core/tensor_tree.h"

namespace magic {

struct SafetensorsFile {
  TensorTree tensors;
  std::map<std::string, std::string> metadata;
};

// The dtype codes of the format ("F64", "BF16", "I64", ...); nullopt / std::invalid_argument for
// a code or dtype it has none for.
std::optional<c10::ScalarType> safetensors_dtype(const std::string& code);
std::string safetensors_dtype_code(c10::ScalarType type);

// Writes atomically (to a temporary name, then renamed): no half-written file is left.
void save_safetensors(const std::string& path, const TensorTree& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// What load_safetensors reads: every tensor, or only the header (tensors on the meta device:
// shapes and dtypes, no data).
enum class SafetensorsRead { kData, kHeaderOnly };

// Throws InputError naming the file and the defect (truncated, bad header, unknown dtype,
// offsets out of range or overlapping).
SafetensorsFile load_safetensors(const std::string& path, SafetensorsRead read = SafetensorsRead::kData);

}  // namespace magic
