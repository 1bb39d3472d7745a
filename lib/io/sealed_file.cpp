#include "lib/io/sealed_file.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "lib/core/error.h"
#include "lib/core/fnv1a.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"

namespace magic {
namespace {

constexpr const char* kSealKey = "magic.seal";
constexpr const char* kChecksumKey = "magic.checksum";

}  // namespace

std::string tensors_checksum(const TensorTree& tensors) {
  std::vector<std::string> names;
  for (const auto& e : tensors) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  uint64_t h = kFnvBasis;
  for (const auto& name : names) {
    const at::Tensor t = tensors.at(name).contiguous().cpu();
    const std::string head = str_cat(name, '\0', c10::toString(t.scalar_type()), '\0', t.sizes(), '\0');
    h = fnv1a(h, head.data(), head.size());
    h = fnv1a(h, t.data_ptr(), t.nbytes());
  }
  return hex16(h);
}

std::string folder_seal(const std::string& folder) {
  const std::filesystem::path p = std::filesystem::path(folder).lexically_normal();
  const std::filesystem::path tail = p.has_filename() ? p : p.parent_path();
  return (tail.parent_path().filename() / tail.filename()).string();
}

void save_sealed(const std::string& path, const TensorTree& tensors, const std::string& seal) {
  save_safetensors(path, tensors, {{kSealKey, seal}, {kChecksumKey, tensors_checksum(tensors)}});
}

TensorTree load_sealed(const std::string& path, const std::string& seal, const std::string& what) {
  SafetensorsFile file;
  try {
    file = load_safetensors(path);
  } catch (const InputError& e) {
    throw InputError(str_cat(what, ": ", e.what()));
  }
  const auto seal_it = file.metadata.find(kSealKey);
  const auto sum_it = file.metadata.find(kChecksumKey);
  if (seal_it == file.metadata.end() || sum_it == file.metadata.end()) {
    throw InputError(str_cat(what, ": ", path, ": has no seal and checksum (not written by this run)"));
  }
  if (seal_it->second != seal) {
    throw InputError(str_cat(what, ": ", path, ": belongs to another run or record (sealed '", seal_it->second,
                             "', expected '", seal, "')"));
  }
  if (const std::string sum = tensors_checksum(file.tensors); sum != sum_it->second) {
    throw InputError(str_cat(what, ": ", path, ": checksum ", sum, " does not match the ", sum_it->second,
                             " written with it (the file was changed or damaged)"));
  }
  return std::move(file.tensors);
}

}  // namespace magic
