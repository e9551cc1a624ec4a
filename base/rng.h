// Counter-based random numbers (Philox-4x32-10).
//
// A (seed, offset) pair fully determines the stream, so dropout masks and data
// sampling are reproducible and can be regenerated in the backward pass or after
// a restart without storing state beyond two integers.
//
//   Philox rng(seed, /*offset=*/step);
//   float u = rng.Uniform(i);   // i-th uniform in [0, 1) of this stream
#pragma once

#include <cstdint>

// Philox's draws are also made in CUDA kernels (attention dropout), from this
// same code, so host and device agree bit for bit.
#if defined(__CUDACC__)
#define LOOM_RNG_HD __host__ __device__
#else
#define LOOM_RNG_HD
#endif

namespace loom {

class Philox {
 public:
  LOOM_RNG_HD Philox(uint64_t seed, uint64_t offset) : key_{uint32_t(seed), uint32_t(seed >> 32)}, offset_(offset) {}

  // Four 32-bit random words for counter `idx` of this stream.
  LOOM_RNG_HD void Block(uint64_t idx, uint32_t out[4]) const {
    uint32_t c[4] = {uint32_t(idx), uint32_t(idx >> 32), uint32_t(offset_), uint32_t(offset_ >> 32)};
    uint32_t k[2] = {key_[0], key_[1]};
    for (int r = 0; r < 10; ++r) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c[0];
      uint64_t p1 = uint64_t(0xCD9E8D57u) * c[2];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c[1] ^ k[0];
      uint32_t n1 = uint32_t(p1);
      uint32_t n2 = uint32_t(p0 >> 32) ^ c[3] ^ k[1];
      uint32_t n3 = uint32_t(p0);
      c[0] = n0; c[1] = n1; c[2] = n2; c[3] = n3;
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    out[0] = c[0]; out[1] = c[1]; out[2] = c[2]; out[3] = c[3];
  }

  LOOM_RNG_HD uint32_t Bits(uint64_t i) const {
    uint32_t b[4];
    Block(i >> 2, b);
    return b[i & 3];
  }

  // Uniform float in [0, 1) with 24 bits of precision.
  LOOM_RNG_HD float Uniform(uint64_t i) const { return (Bits(i) >> 8) * (1.0f / 16777216.0f); }

  // Standard normal (Box-Muller over two uniforms).
  double Normal(uint64_t i) const;

 private:
  uint32_t key_[2];
  uint64_t offset_;
};

}  // namespace loom
