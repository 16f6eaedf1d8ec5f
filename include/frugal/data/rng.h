// Small, portable, seedable hashing used to derive independent random streams from (seed, step)
// pairs, so that the batch of step s is a pure function of the seed and s (which makes resuming
// exact without storing sampler state).
#pragma once

#include <cstdint>

namespace frugal {

// SplitMix64 finaliser (Steele et al.): a bijective 64-bit mix with good avalanche.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A stream id for (seed, a, b): used as a std::mt19937_64 seed.
inline uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ (b * 0x9e3779b97f4a7c15ULL));
}

}  // namespace frugal
