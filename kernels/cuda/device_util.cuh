// Device helpers shared by the raw-pointer kernels (dtype_code.h): loads and
// stores by dtype code (bf16 read as f32, rounded once on store, RN), fixed-
// order block reductions (deterministic), the grid size of grid-stride loops,
// and the fixed-order sum of column partials. Include only from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

__device__ __forceinline__ float Ld(const void* p, int dt, int64_t i) {
  return dt == kBF16 ? __bfloat162float(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void St(void* p, int dt, int64_t i, float v) {
  if (dt == kBF16) static_cast<bf16*>(p)[i] = __float2bfloat16_rn(v);
  else static_cast<float*>(p)[i] = v;
}
__device__ __forceinline__ int64_t LdId(const void* p, int dt, int64_t i) {
  return dt == kI64 ? static_cast<const int64_t*>(p)[i] : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

// Blocks of kThreads for a grid-stride loop over n elements, at most `cap`.
inline int Blocks(int64_t n, int64_t cap = 65536) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<int>(b);
}

inline int Err() { return static_cast<int>(cudaGetLastError()); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum in a fixed order (result valid in every thread).
__device__ float BlockSum(float v) {
  __shared__ float sh[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  float t = lane < nw ? sh[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

// Row chunks of the column-partial sums: (rows + 63) / 64, in [1, 256].
inline int64_t SumParts(int64_t rows) {
  int64_t p = (rows + 63) / 64;
  return p < 1 ? 1 : p > 256 ? 256 : p;
}

// out[c] = sum over p of ws[p * cols + c], dtype odt. 32 columns per block of
// 512 threads, 16 threads down each column over every 16th part, then a
// fixed-order sum (deterministic; a serial walk per column was latency-bound).
__global__ void ColumnPartialsSumK(int odt, int64_t parts, int64_t cols, const float* ws, void* out) {
  __shared__ float sh[16][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t c = blockIdx.x * 32 + tx;
  float s = 0.f;
  if (c < cols)
    for (int64_t p = ty; p < parts; p += 16) s += ws[p * cols + c];
  sh[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < cols) {
    float t = 0.f;
    for (int k = 0; k < 16; ++k) t += sh[k][tx];
    St(out, odt, c, t);
  }
}

}  // namespace
}  // namespace loom::kernels::cuda::kern
