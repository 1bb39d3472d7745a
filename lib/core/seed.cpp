#include "lib/core/seed.h"

#include <ATen/CPUGeneratorImpl.h>

namespace magic {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t derive_seed(uint64_t seed, std::string_view purpose, uint64_t index) {
  uint64_t h = splitmix64(seed);
  for (unsigned char c : purpose) h = splitmix64(h ^ c);
  return splitmix64(h ^ splitmix64(index + 0x632BE59BD9B4E019ull));
}

at::Generator make_generator(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

uint64_t Rng::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rng::below(uint64_t bound) {
  // Rejection sampling: drop the top partial copy of [0, bound) so every value is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x = next();
  while (x >= limit) x = next();
  return x % bound;
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace magic
