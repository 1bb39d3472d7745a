// Every random choice flows from one user seed: derive_seed(seed, purpose, index) gives an
// independent stream per purpose ("init", "shuffle", "hvp-direction", ...), so adding a new
// consumer never shifts the numbers an old one sees.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace magic {

// SplitMix64 finalizer: a bijective 64-bit mix.
uint64_t splitmix64(uint64_t x);

uint64_t derive_seed(uint64_t seed, std::string_view purpose, uint64_t index = 0);

// A CPU generator for LibTorch's random functions (init, random directions).
at::Generator make_generator(uint64_t seed);

// A small portable PRNG (SplitMix64 stream) for index choices; std::shuffle's algorithm is
// implementation-defined, this is not.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t bound);  // uniform in [0, bound), unbiased
  double uniform();                // uniform in [0, 1)

 private:
  uint64_t state_;
};

// Fisher-Yates permutation of 0..n-1.
std::vector<int64_t> permutation(int64_t n, uint64_t seed);

}  // namespace magic
