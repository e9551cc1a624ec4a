// Device helpers shared by the raw-pointer kernels (dtype_code.h): loads and
// stores by dtype code (bf16 read as f32, rounded once on store, RN), 16-byte
// vector loads and stores, fixed-
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
// 16-byte vectors: 8 bf16 from one load as floats, 8 floats rounded (to
// nearest even) into one bf16 store, and 8 f32 from two loads. The pointers
// behind them must be 16-byte aligned.
__device__ __forceinline__ void Unpack8(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 t = __bfloat1622float2(h[k]);
    f[2 * k] = t.x, f[2 * k + 1] = t.y;
  }
}
__device__ __forceinline__ uint4 Pack8(const float* f) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  return u;
}
__device__ __forceinline__ void Load8(const float* p, float* f) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
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
