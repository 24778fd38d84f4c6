#pragma once
// Deterministic RNG (xoshiro256**, seeded through splitmix64) with our own
// distributions, so results do not depend on the standard library's implementation.
// The state is four words: checkpoints save and restore it.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace xmc {

__extension__ using uint128_t = unsigned __int128;

// Everything but normal() and the std::array state accessors is XMC_HOST_DEVICE: a CUDA kernel
// draws the same numbers from the same seed (anns_sampled's uniform negatives, ops/sampled.h).

// The splitmix64 step (the golden-ratio increment, then the finaliser): Rng's seeding, the
// probe sequence of dwta densification, the seeded hashes of the LSH candidate sampler.
XMC_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  XMC_HOST_DEVICE explicit Rng(uint64_t seed = 0) {
    for (uint64_t& s : s_) {
      s = mix64(seed);
      seed += 0x9e3779b97f4a7c15ULL;
    }
  }
  // seed for the label shard starting at `offset` (a first label or group): seed itself at
  // offset 0, so that one process draws as before sharding existed.
  XMC_HOST_DEVICE static uint64_t shard_seed(uint64_t seed, int64_t offset) {
    return seed ^ (static_cast<uint64_t>(offset) * 0x9E3779B97F4A7C15ULL);
  }
  // An independent stream derived from this seed and a stream id (e.g. a thread or epoch).
  XMC_HOST_DEVICE static Rng stream(uint64_t seed, uint64_t id) {
    return Rng(seed * 0x2545F4914F6CDD1DULL + id * 0x9E3779B97F4A7C15ULL + 1);
  }

  XMC_HOST_DEVICE uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1).
  XMC_HOST_DEVICE double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  XMC_HOST_DEVICE float uniformf() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, negligible bias for n << 2^64).
  XMC_HOST_DEVICE uint64_t below(uint64_t n) {
#ifdef __CUDA_ARCH__
    return __umul64hi(next(), n);  // the same high word as the host's 128-bit product
#else
    return static_cast<uint64_t>((static_cast<uint128_t>(next()) * n) >> 64);
#endif
  }
  // Standard normal (Box-Muller, no caching so the state stays four words).
  double normal() {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  std::array<uint64_t, 4> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  void set_state(const std::array<uint64_t, 4>& s) { std::copy(s.begin(), s.end(), s_); }
  // The same four words through a plain array (device code: the LSH reservoir's state).
  XMC_HOST_DEVICE void get_state(uint64_t* s) const {
    for (int q = 0; q < 4; ++q) s[q] = s_[q];
  }
  XMC_HOST_DEVICE void set_state(const uint64_t* s) {
    for (int q = 0; q < 4; ++q) s_[q] = s[q];
  }

 private:
  XMC_HOST_DEVICE static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4] = {};
};

}  // namespace xmc
