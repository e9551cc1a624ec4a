// LayerNorm backward kernels behind layernorm.h (sm_90), other than the
// vectorised bf16 one (layernorm_vec_kernels.cu): a warp per row for rows of
// at most 1024 columns, a block per row for wider ones, and the fixed-order
// reduction of the per-block dw/db partial rows that every variant writes.
// bf16 values are read and computed in f32 and rounded once on store
// (round-to-nearest-even).
#include <cuda_bf16.h>

#include "kernels/cuda/layernorm_kernels.h"

namespace loom::kernels::cuda::launch {
namespace {

using bf16_t = __nv_bfloat16;

__device__ __forceinline__ float Ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Ld(const bf16_t* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void St(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void St(bf16_t* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Block-wide sum; sh holds 32 floats; every thread gets the result.
__device__ float BlockSum(float v, float* sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    float r = lane < nw ? sh[lane] : 0.0f;
    r = WarpSum(r);
    if (lane == 0) sh[0] = r;
  }
  __syncthreads();
  return sh[0];
}

// Rows of at most kWarpRowMaxCols columns: one warp per row, the row's values
// in registers (kPer per lane, column lane + 32 j), reductions by shuffles only
// (no __syncthreads in the row loop). The block-per-row kernel below serves
// wider rows.
constexpr int kWarpRowMaxCols = 1024;

// dw/db partials stay in registers across the warp's rows; the block's warps
// then add theirs into shared memory one warp at a time (deterministic) and
// the block writes one partial row, as the block kernel does.
template <typename T, int kPer>
__global__ void LayerNormBwdWarpKernel(int64_t rows, int cols, const T* dy, const T* x, const float* w,
                                       const float* mean, const float* rstd, const T* dres, T* dx, float* part) {
  extern __shared__ float acc[];  // [2*cols]: dw, db
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  float aw[kPer], ab[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) aw[j] = ab[j] = 0.0f;
  for (int64_t r = int64_t(blockIdx.x) * nw + warp; r < rows; r += int64_t(gridDim.x) * nw) {
    const float mu = mean[r], rs = rstd[r];
    const T* xr = x + r * cols;
    const T* dr = dy + r * cols;
    float xh[kPer], g[kPer];
    float s1 = 0, s2 = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = lane + 32 * j;
      xh[j] = g[j] = 0.0f;
      if (c < cols) {
        const float d = Ld(dr, c);
        xh[j] = (Ld(xr, c) - mu) * rs;
        g[j] = d * w[c];
        aw[j] += d * xh[j];
        ab[j] += d;
      }
      s1 += g[j];
      s2 += g[j] * xh[j];
    }
    const float m1 = WarpSum(s1) / cols;
    const float m2 = WarpSum(s2) / cols;
    T* o = dx + r * cols;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = lane + 32 * j;
      if (c < cols) {
        float v = rs * (g[j] - m1 - xh[j] * m2);
        if (dres) v += Ld(dres + r * cols, c);
        St(o, c, v);
      }
    }
  }
  for (int c = threadIdx.x; c < 2 * cols; c += blockDim.x) acc[c] = 0.0f;
  __syncthreads();
  for (int w2 = 0; w2 < nw; ++w2) {
    if (warp == w2) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int c = lane + 32 * j;
        if (c < cols) {
          acc[c] += aw[j];
          acc[cols + c] += ab[j];
        }
      }
    }
    __syncthreads();
  }
  float* p = part + int64_t(blockIdx.x) * 2 * cols;
  for (int c = threadIdx.x; c < 2 * cols; c += blockDim.x) p[c] = acc[c];
}

// Partial rows the workspace holds (the vectorised kernel uses up to one per
// resident block); the warp and block kernels use at most kLnBwdScalarParts.
constexpr int64_t kLnBwdMaxParts = 512;
constexpr int64_t kLnBwdScalarParts = 256;

template <typename T>
__global__ void LayerNormBwdKernel(int64_t rows, int64_t cols, const T* dy, const T* x, const float* w,
                                   const float* mean, const float* rstd, const T* dres, T* dx, float* part) {
  extern __shared__ float acc[];  // [2*cols]: dw partials, db partials
  __shared__ float sh[32];
  for (int64_t c = threadIdx.x; c < 2 * cols; c += blockDim.x) acc[c] = 0.0f;
  // Thread t touches only columns t, t+blockDim, ...: acc needs no atomics.
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float mu = mean[r], rs = rstd[r];
    const T* xr = x + r * cols;
    const T* dr = dy + r * cols;
    float s1 = 0, s2 = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float xh = (Ld(xr, c) - mu) * rs, d = Ld(dr, c), g = d * w[c];
      s1 += g;
      s2 += g * xh;
      acc[c] += d * xh;
      acc[cols + c] += d;
    }
    const float m1 = BlockSum(s1, sh) / cols;
    const float m2 = BlockSum(s2, sh) / cols;
    T* o = dx + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float xh = (Ld(xr, c) - mu) * rs, g = Ld(dr, c) * w[c];
      float v = rs * (g - m1 - xh * m2);
      if (dres) v += Ld(dres + r * cols, c);
      St(o, c, v);
    }
  }
  // acc[cols + c] was summed by the thread owning c, which is not the thread
  // that copies it out when cols % blockDim != 0.
  __syncthreads();
  float* p = part + blockIdx.x * 2 * cols;
  for (int64_t c = threadIdx.x; c < 2 * cols; c += blockDim.x) p[c] = acc[c];
}

// Sums the per-block partials: 32 columns per block, 16 threads down each
// column taking every 16th part, then a fixed-order sum of their 16 results
// (deterministic). One thread per column walking all parts serially was
// latency-bound (~100 us at 256 parts).
// blockIdx.y picks the partial: 0 dw, 1 db.
__global__ void LayerNormBwdReduce(int64_t cols, int64_t parts, const float* part, float* dw, float* db) {
  __shared__ float sw[16][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, which = blockIdx.y;
  float* out = which == 0 ? dw : db;
  if (!out) return;  // uniform per block
  const int64_t c = blockIdx.x * 32 + tx;
  const int64_t stride = 2 * cols, off = which * cols + c;
  float w = 0;
  if (c < cols)
    for (int64_t i = ty; i < parts; i += 16) w += part[i * stride + off];
  sw[ty][tx] = w;
  __syncthreads();
  if (ty == 0 && c < cols) {
    float tw = 0;
    for (int k = 0; k < 16; ++k) tw += sw[k][tx];
    out[c] = tw;
  }
}

int RowThreads(int64_t cols) { return cols >= 4096 ? 1024 : cols >= 1024 ? 512 : 256; }

template <typename T>
cudaError_t LaunchWarpKernel(int64_t rows, int64_t cols, int64_t parts, size_t smem, const void* dy, const void* x,
                             const float* w, const float* mean, const float* rstd, const void* dres, void* dx,
                             float* workspace, cudaStream_t s) {
  const int c = int(cols);
#define LOOM_LN_BWD(K)                                                                                          \
  LayerNormBwdWarpKernel<T, K><<<unsigned(parts), 256, smem, s>>>(rows, c, static_cast<const T*>(dy),            \
                                                                  static_cast<const T*>(x), w, mean, rstd,       \
                                                                  static_cast<const T*>(dres), static_cast<T*>(dx), \
                                                                  workspace);
  if (cols <= 256) { LOOM_LN_BWD(8) } else if (cols <= 512) { LOOM_LN_BWD(16) }
  else if (cols <= 768) { LOOM_LN_BWD(24) } else { LOOM_LN_BWD(32) }
#undef LOOM_LN_BWD
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchBlockKernel(int64_t rows, int64_t cols, int64_t parts, size_t smem, const void* dy, const void* x,
                              const float* w, const float* mean, const float* rstd, const void* dres, void* dx,
                              float* workspace, cudaStream_t s) {
  cudaError_t e = cudaFuncSetAttribute(LayerNormBwdKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  LayerNormBwdKernel<T><<<parts, RowThreads(cols), smem, s>>>(rows, cols, static_cast<const T*>(dy),
                                                              static_cast<const T*>(x), w, mean, rstd,
                                                              static_cast<const T*>(dres), static_cast<T*>(dx),
                                                              workspace);
  return cudaGetLastError();
}

}  // namespace

int64_t LayerNormBwdParts(int64_t rows) { return rows < kLnBwdMaxParts ? rows : kLnBwdMaxParts; }

cudaError_t LayerNormBwd(int bf16, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                         const float* mean, const float* rstd, const void* dres, void* dx, float* dw, float* db,
                         float* workspace, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t max_parts = LayerNormBwdParts(rows);
  int64_t parts = max_parts < kLnBwdScalarParts ? max_parts : kLnBwdScalarParts;  // warp and block kernels
  const size_t smem = size_t(2 * cols) * sizeof(float);
  cudaError_t e;
  if (LayerNormBwdVecApplies(bf16, cols, dy, x, w, dres, dx)) {
    e = LayerNormBwdVec(rows, cols, max_parts, dy, x, w, mean, rstd, dres, dx, workspace, &parts, s);
  } else if (cols <= kWarpRowMaxCols) {
    e = bf16 ? LaunchWarpKernel<bf16_t>(rows, cols, parts, smem, dy, x, w, mean, rstd, dres, dx, workspace, s)
             : LaunchWarpKernel<float>(rows, cols, parts, smem, dy, x, w, mean, rstd, dres, dx, workspace, s);
  } else {
    e = bf16 ? LaunchBlockKernel<bf16_t>(rows, cols, parts, smem, dy, x, w, mean, rstd, dres, dx, workspace, s)
             : LaunchBlockKernel<float>(rows, cols, parts, smem, dy, x, w, mean, rstd, dres, dx, workspace, s);
  }
  if (e != cudaSuccess) return e;
  const dim3 reduce_grid(unsigned((cols + 31) / 32), 2u);
  LayerNormBwdReduce<<<reduce_grid, 512, 0, s>>>(cols, parts, workspace, dw, db);
  return cudaGetLastError();
}

}  // namespace loom::kernels::cuda::launch
