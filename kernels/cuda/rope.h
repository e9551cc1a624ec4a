// Interleaved rotary position embedding, raw device pointers (dtype_code.h).
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

// x, y [B, T, H, D] (dt: kF32 or kBF16), pairs (2i, 2i+1) rotated by the angle
// (offset + t) * theta^(-2i/D), negated when inverse.
int Rope(Dt dt, int64_t B, int64_t T, int64_t H, int64_t D, double theta, int64_t offset, bool inverse,
         const void* x, void* y, Stream s);

}  // namespace loom::kernels::cuda::kern
