// safetensors files: 8-byte little-endian header length, a JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the raw little-endian data. Readable by Python's safetensors and back.
#pragma once

#include <map>
#include <string>

#include "lib/core/tensor_tree.h"

namespace magic {

struct SafetensorsFile {
  TensorTree tensors;
  std::map<std::string, std::string> metadata;
};

// Writes atomically (to a temporary name, then renamed): no half-written file is left.
void save_safetensors(const std::string& path, const TensorTree& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Throws InputError naming the file and the defect (truncated, bad header, unknown dtype,
// offsets out of range or overlapping).
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace magic
