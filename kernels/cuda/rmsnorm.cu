// RMSNorm forward and backward (rmsnorm.h): one block per row; the weight
// gradient through per-chunk column partials and their fixed-order sum.
#include "kernels/cuda/rmsnorm.h"

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/fill.h"

namespace loom::kernels::cuda::kern {
namespace {

__global__ void RmsFwdK(int dt, int64_t cols, const void* x, const float* w, float eps, void* y, float* rstd) {
  const int64_t base = blockIdx.x * cols;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = Ld(x, dt, base + j);
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float rs = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) St(y, dt, base + j, Ld(x, dt, base + j) * rs * w[j]);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
}
__global__ void RmsBwdDxK(int dt, int64_t cols, const void* dy, const void* x, const float* w, const float* rstd,
                          const void* dres, void* dx) {
  const int64_t base = blockIdx.x * cols;
  const float rs = rstd[blockIdx.x];
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += Ld(dy, dt, base + j) * w[j] * Ld(x, dt, base + j) * rs;
  const float mgx = BlockSum(s) / static_cast<float>(cols);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float g = rs * (Ld(dy, dt, base + j) * w[j] - Ld(x, dt, base + j) * rs * mgx);
    St(dx, dt, base + j, dres ? g + Ld(dres, dt, base + j) : g);
  }
}
__global__ void RmsBwdDwPartK(int dt, int64_t rows, int64_t cols, int64_t chunk, const void* dy, const void* x,
                              const float* rstd, float* ws) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float s = 0.f;
  for (int64_t r = r0; r < r1; ++r) s += Ld(dy, dt, r * cols + c) * Ld(x, dt, r * cols + c) * rstd[r];
  ws[blockIdx.y * cols + c] = s;
}

}  // namespace

int RmsNormForward(Dt dt, int64_t rows, int64_t cols, const void* x, const float* w, double eps, void* y,
                   float* rstd, Stream s) {
  if (rows <= 0) return 0;
  RmsFwdK<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(s)>>>(
      dt, cols, x, w, static_cast<float>(eps), y, rstd);
  return Err();
}

int64_t RmsNormBwdWorkspaceFloats(int64_t rows, int64_t cols) { return SumParts(rows) * cols; }

int RmsNormBackward(Dt dt, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                    const float* rstd, void* dx, float* dw, float* ws, Stream s, const void* dresidual) {
  if (rows <= 0) return Fill(kF32, cols, 0.0, dw, s);
  cudaStream_t st = static_cast<cudaStream_t>(s);
  RmsBwdDxK<<<static_cast<unsigned>(rows), kThreads, 0, st>>>(dt, cols, dy, x, w, rstd, dresidual, dx);
  const int64_t parts = SumParts(rows), chunk = (rows + parts - 1) / parts;
  dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(parts));
  RmsBwdDwPartK<<<grid, kThreads, 0, st>>>(dt, rows, cols, chunk, dy, x, rstd, ws);
  ColumnPartialsSumK<<<static_cast<unsigned>((cols + 31) / 32), 512, 0, st>>>(kF32, parts, cols, ws, dw);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
