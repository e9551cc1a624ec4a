// Attention dropout's keep decision, shared by the CUDA math kernel
// (sdpa_math.cu), the fp64 CPU reference (attention_reference.cc) and, through
// the same Philox stream, the CPU sdpa op (kernels/sdpa/sdpa.h), so all of them
// drop exactly the same probabilities.
//
// Element (b, h, i, j) of the [B, H, Tq, Tk] probability matrix has the linear
// index idx = ((b H + h) Tq + i) Tk + j. It is kept when
// Philox(seed, offset).Uniform(idx) >= p (base/rng.h, Philox-4x32-10): a
// counter-based draw, so forward and backward regenerate the same mask without
// storing it and every element is independent of the launch configuration.
// The kept probabilities are scaled by 1 / (1 - p), as PyTorch's dropout.
// offset 0 is the CPU op's stream; a caller may advance it between steps.
#pragma once

#include <cstdint>

#include "base/rng.h"

#if defined(__CUDACC__)
#define LOOM_SDPA_HD __host__ __device__ __forceinline__
#else
#define LOOM_SDPA_HD inline
#endif

namespace loom::kernels::cuda::attention {

LOOM_SDPA_HD bool DropoutKeep(uint64_t seed, uint64_t offset, uint64_t idx, float p) {
  return Philox(seed, offset).Uniform(idx) >= p;
}

}  // namespace loom::kernels::cuda::attention
