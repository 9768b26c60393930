// Small, portable random numbers for deterministic data generation and shuffling.
//
// The standard distributions (std::uniform_int_distribution, std::shuffle) are
// implementation-defined, so the same seed could give different data with
// another standard library. Everything here is specified bit for bit.
#pragma once

#include <cstdint>

namespace saccade::data {

// SplitMix64's finaliser: a bijective 64-bit hash with good avalanche.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A seed for stream `stream` of a run seeded with `seed` (e.g. image i, epoch e).
// Distinct (seed, stream) pairs give unrelated sequences.
inline uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  return splitmix64(splitmix64(seed) ^ (stream * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull));
}

// SplitMix64 generator (Steele, Lea, Flood 2014): tiny state, passes BigCrush.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), unbiased (rejection of the short last bucket). n >= 1.
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  // Uniform in [lo, hi], inclusive. lo <= hi.
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }

 private:
  uint64_t state_;
};

}  // namespace saccade::data
