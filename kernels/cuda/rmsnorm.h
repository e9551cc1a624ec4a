// RMSNorm over the last dim of [rows, cols], raw device pointers
// (dtype_code.h): x, y, dy, dx in dt (kF32 or kBF16); w, rstd, dw f32.
//   y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps)
//   dx = rstd * (dy * w - x * rstd * mean(dy * w * x * rstd)), dw = sum_rows dy * x * rstd
// Fixed-order reductions: deterministic.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

int RmsNormForward(Dt dt, int64_t rows, int64_t cols, const void* x, const float* w, double eps, void* y,
                   float* rstd, Stream s);
// workspace: RmsNormBwdWorkspaceFloats(rows, cols) floats (dw's column partials).
// dresidual (optional, dt, [rows, cols]): added to dx in f32 before dx is
// stored once (a residual branch's gradient: dx = norm's dx + dresidual).
int64_t RmsNormBwdWorkspaceFloats(int64_t rows, int64_t cols);
int RmsNormBackward(Dt dt, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                    const float* rstd, void* dx, float* dw, float* workspace, Stream s,
                    const void* dresidual = nullptr);

}  // namespace loom::kernels::cuda::kern
