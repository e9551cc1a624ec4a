// RMSNorm over the last dim of [rows, cols], raw device pointers
// (dtype_code.h): x, y in dt (kF32 or kBF16); the backward's dy, x and dx
// each in its own float dtype (RmsNormBwdArgs); w, rstd, dw f32.
//   y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps)
//   dx = rstd * (dy * w - x * rstd * mean(dy * w * x * rstd)), dw = sum_rows dy * x * rstd
// Fixed-order reductions: deterministic.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

int RmsNormForward(Dt dt, int64_t rows, int64_t cols, const void* x, const float* w, double eps, void* y,
                   float* rstd, Stream s);
// The backward's operands. Each float operand has its own dtype (kF32 or
// kBF16): an f32 residual stream's norm reads the bf16 gradient of its GEMM
// (dy) and the f32 stream (x), and writes the stream's f32 gradient (dx).
//   workspace: RmsNormBwdWorkspaceFloats(rows, cols) floats (dw's column partials).
//   dresidual (optional, [rows, cols]): added to dx in f32 before dx is
//     stored once (a residual branch's gradient: dx = norm's dx + dresidual).
//   dx_bf16 (optional, [rows, cols] bf16): dx rounded to bf16 (to nearest
//     even) as well, from the same f32 values: the bf16 operand that the
//     GEMMs reading an f32 dx need, without a cast launch.
struct RmsNormBwdArgs {
  Dt dy_dt = kBF16, x_dt = kBF16, dres_dt = kBF16, dx_dt = kBF16;
  int64_t rows = 0, cols = 0;
  const void* dy = nullptr;
  const void* x = nullptr;
  const float* w = nullptr;
  const float* rstd = nullptr;
  const void* dresidual = nullptr;
  void* dx = nullptr;
  void* dx_bf16 = nullptr;
  float* dw = nullptr;
  float* workspace = nullptr;
  Stream stream = nullptr;
};
int64_t RmsNormBwdWorkspaceFloats(int64_t rows, int64_t cols);
int RmsNormBackward(const RmsNormBwdArgs& a);

}  // namespace loom::kernels::cuda::kern
