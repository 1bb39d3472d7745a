// Patch features of a multimodal dataset (docs/magic-run.md, "Multimodal runs"): a safetensors
// file beside the JSONL text holding one [patches, features] tensor per document, named by the
// document's id. Every example of a document (each of its chunks) gets that document's patches.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lib/data/text_loader.h"
#include "lib/data/token_dataset.h"

namespace magic {

// [N, patches, features] fp64 for the examples of `data` (N = data.size()), from `path`. Throws
// InputError naming the file and the document for a missing tensor, a shape other than
// [patches, features], a value that is not finite or a file the reader refuses.
at::Tensor load_patch_features(const std::string& path, const std::vector<TextDocument>& documents,
                               const TokenDataset& data, int64_t patches, int64_t features);

// `data` with `patches` [N, P, F] as its prefix: P columns (pad id, label -100) before each row.
TokenDataset with_patch_prefix(TokenDataset data, at::Tensor patches);

// The patches of `rows` (example indices; data.size() is the padding row, all zeros): [rows, P, F].
at::Tensor patches_of_rows(const at::Tensor& patches, const std::vector<int64_t>& rows);

}  // namespace magic
