// Interleaved rotary position embedding, raw device pointers (dtype_code.h).
//
//   RopeTable(T, D, theta, offset, table, s);            // once per shape
//   Rope(dt, B, T, H, D, inverse, table, x, y, s);        // every step
//
// The angle of position t and pair i is a = (offset + t) * theta^(-2i/D),
// computed in double (pow, cos, sin) and rounded to f32 once, into a table
// the rotation then reads, so a step does no transcendental math: the
// rotation is bound by memory, not by double-precision pow/cos/sin per pair.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

// table: T * (D / 2) * 2 floats, [t][i] = {cos a, sin a}.
int64_t RopeTableFloats(int64_t T, int64_t D);
int RopeTable(int64_t T, int64_t D, double theta, int64_t offset, float* table, Stream s);

// x, y [B, T, H, D] (dt: kF32 or kBF16): pairs (2i, 2i+1) rotated by the
// table's angle of (t, i), negated when inverse:
//   y[2i] = x[2i] cos a - x[2i+1] sin a,  y[2i+1] = x[2i] sin a + x[2i+1] cos a.
int Rope(Dt dt, int64_t B, int64_t T, int64_t H, int64_t D, bool inverse, const float* table, const void* x, void* y,
         Stream s);

}  // namespace loom::kernels::cuda::kern
