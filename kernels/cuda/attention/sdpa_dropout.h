// Attention dropout's keep decision, shared by the CUDA math kernel
// (sdpa_math.cu) and the fp64 CPU reference (attention_reference.cc), so both
// drop exactly the same probabilities.
//
// Element (b, h, i, j) of the [B, H, Tq, Tk] probability matrix has the linear
// index idx = ((b H + h) Tq + i) Tk + j. It is kept when the 24-bit uniform
// drawn from (seed, offset + idx) is >= p: a counter-based draw (SplitMix64's
// finaliser over the seed-keyed counter), so forward and backward regenerate
// the same mask without storing it and every element is independent of the
// launch configuration. The kept probabilities are scaled by 1 / (1 - p), as
// PyTorch's dropout. `offset` lets a caller advance the stream between steps.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LOOM_SDPA_HD __host__ __device__ __forceinline__
#else
#define LOOM_SDPA_HD inline
#endif

namespace loom::cuda::attn {

LOOM_SDPA_HD uint64_t DropoutMix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Uniform in [0, 1) with 24 bits.
LOOM_SDPA_HD float DropoutUniform(uint64_t seed, uint64_t counter) {
  const uint64_t h = DropoutMix(DropoutMix(seed + 0x9e3779b97f4a7c15ull) ^ (counter * 0xd1342543de82ef95ull));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

LOOM_SDPA_HD bool DropoutKeep(uint64_t seed, uint64_t offset, uint64_t idx, float p) {
  return DropoutUniform(seed, offset + idx) >= p;
}

}  // namespace loom::cuda::attn
