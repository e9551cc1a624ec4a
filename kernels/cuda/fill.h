// Fill and the f32 -> bf16 cast over raw device pointers (dtype_code.h).
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

// n elements of dtype dt (floating or integer) set to value.
int Fill(Dt dt, int64_t n, double value, void* out, Stream s);
// out[i] = bf16(x[i]) (round to nearest even) for n f32 values.
int CastF32ToBF16(int64_t n, const float* x, void* out, Stream s);

}  // namespace loom::kernels::cuda::kern
