// Files a run writes and later reads back as input (resume's checkpoints and REPLAY journal) are
// untrusted like any other input: each is a safetensors file whose metadata carries a seal (what
// the file is: the run's fingerprint, the record's kind and step) and a checksum of its tensors.
// Reading one back verifies both before a value is used, and refuses a truncated, zero-length,
// bit-flipped or foreign file with an InputError naming the file and what is wrong (exit 2):
// a resumed run never continues from damaged state into different scores.
#pragma once

#include <string>

#include "lib/core/tensor_tree.h"

namespace magic {

// FNV-1a over every tensor in name order: name, dtype, shape and raw bytes (sealed_file.cpp).
std::string tensors_checksum(const TensorTree& tensors);

// What a folder's records are sealed with: its last two path components ("magic-run-<hash>/rank-1"),
// so that a file copied from another run's or another rank's folder is refused.
std::string folder_seal(const std::string& folder);

// Writes `tensors` to `path` (atomically, as save_safetensors) with `seal` and their checksum.
void save_sealed(const std::string& path, const TensorTree& tensors, const std::string& seal);

// The tensors of `path`, after checking that it is a whole safetensors file with this `seal`
// and a checksum that matches its tensors. `what` names the record in errors ("checkpoint of
// step 10").
TensorTree load_sealed(const std::string& path, const std::string& seal, const std::string& what);

}  // namespace magic
