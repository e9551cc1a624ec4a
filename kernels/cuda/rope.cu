// Interleaved rotary embedding (rope.h): the angles' table once, then one
// thread per (even, odd) pair reading it.
#include "kernels/cuda/rope.h"

#include "kernels/cuda/device_util.cuh"

namespace loom::kernels::cuda::kern {
namespace {

__global__ void RopeTableK(int64_t T, int64_t D, double theta, int64_t offset, float* table) {
  const int64_t half = D / 2, n = T * half;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = p / half, i = p - t * half;
    const double a = static_cast<double>(offset + t) * pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    table[2 * p] = static_cast<float>(cos(a));
    table[2 * p + 1] = static_cast<float>(sin(a));
  }
}

__global__ void RopeK(int dt, int64_t T, int64_t H, int64_t D, bool inverse, const float* table, const void* x,
                      void* y, int64_t pairs) {
  const int64_t half = D / 2;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p % half;
    const int64_t t = (p / (half * H)) % T;
    const float2 cs = reinterpret_cast<const float2*>(table)[t * half + i];
    const float c = cs.x, sn = inverse ? -cs.y : cs.y;
    const float x0 = Ld(x, dt, 2 * p), x1 = Ld(x, dt, 2 * p + 1);
    St(y, dt, 2 * p, x0 * c - x1 * sn);
    St(y, dt, 2 * p + 1, x0 * sn + x1 * c);
  }
}

}  // namespace

int64_t RopeTableFloats(int64_t T, int64_t D) { return T * (D / 2) * 2; }

int RopeTable(int64_t T, int64_t D, double theta, int64_t offset, float* table, Stream s) {
  const int64_t n = T * (D / 2);
  if (n <= 0) return 0;
  RopeTableK<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(T, D, theta, offset, table);
  return Err();
}

int Rope(Dt dt, int64_t B, int64_t T, int64_t H, int64_t D, bool inverse, const float* table, const void* x, void* y,
         Stream s) {
  const int64_t pairs = B * T * H * (D / 2);
  if (pairs <= 0) return 0;
  RopeK<<<Blocks(pairs), kThreads, 0, static_cast<cudaStream_t>(s)>>>(dt, T, H, D, inverse, table, x, y, pairs);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
