// Interleaved rotary embedding (rope.h): one thread per (even, odd) pair.
#include "kernels/cuda/rope.h"

#include "kernels/cuda/device_util.cuh"

namespace loom::kernels::cuda::kern {
namespace {

__global__ void RopeK(int dt, int64_t T, int64_t H, int64_t D, double theta, int64_t offset, bool inverse,
                      const void* x, void* y, int64_t pairs) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t half = D / 2;
    const int64_t i = p % half;
    const int64_t t = (p / (half * H)) % T;
    double a = static_cast<double>(offset + t) * pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    if (inverse) a = -a;
    const float c = static_cast<float>(cos(a)), sn = static_cast<float>(sin(a));
    const float x0 = Ld(x, dt, 2 * p), x1 = Ld(x, dt, 2 * p + 1);
    St(y, dt, 2 * p, x0 * c - x1 * sn);
    St(y, dt, 2 * p + 1, x0 * sn + x1 * c);
  }
}

}  // namespace

int Rope(Dt dt, int64_t B, int64_t T, int64_t H, int64_t D, double theta, int64_t offset, bool inverse,
         const void* x, void* y, Stream s) {
  const int64_t pairs = B * T * H * (D / 2);
  if (pairs <= 0) return 0;
  RopeK<<<Blocks(pairs), kThreads, 0, static_cast<cudaStream_t>(s)>>>(dt, T, H, D, theta, offset, inverse, x, y,
                                                                      pairs);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
