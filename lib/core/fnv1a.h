// FNV-1a, 64 bits: the fingerprint of a run's identity and the checksum of the files a run reads
// back (run_folder.h, sealed_file.h). Not cryptographic: it finds damage, not forgery.
//   h_0 = basis; h_{i+1} = (h_i XOR byte_i) * prime
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace magic {

constexpr uint64_t kFnvBasis = 14695981039346656037ULL;

uint64_t fnv1a(uint64_t h, const void* data, size_t size);

// 16 lowercase hex digits.
std::string hex16(uint64_t h);

}  // namespace magic
