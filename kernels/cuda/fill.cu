// Fill and the f32 -> bf16 cast (fill.h): grid-stride loops.
#include "kernels/cuda/fill.h"

#include "kernels/cuda/device_util.cuh"

namespace loom::kernels::cuda::kern {
namespace {

__global__ void FillK(int dt, int64_t n, float v, void* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (dt == kI32) static_cast<int32_t*>(out)[i] = static_cast<int32_t>(v);
    else if (dt == kI64) static_cast<int64_t*>(out)[i] = static_cast<int64_t>(v);
    else St(out, dt, i, v);
  }
}
__global__ void CastK(int64_t n, const float* x, bf16* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(x[i]);
}

}  // namespace

int Fill(Dt dt, int64_t n, double value, void* out, Stream s) {
  FillK<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(dt, n, static_cast<float>(value), out);
  return Err();
}

int CastF32ToBF16(int64_t n, const float* x, void* out, Stream s) {
  CastK<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(n, x, static_cast<bf16*>(out));
  return Err();
}

}  // namespace loom::kernels::cuda::kern
