// LayerNorm backward for bf16 rows of at most 1024 columns with cols % 8 == 0
// and 16-byte aligned operands (the GPT shapes): LayerNormBwdVec in
// layernorm_kernels.h. One warp per row, each lane owning kVec 16-byte column
// vectors (8 bf16 values each, column 8 * (lane + 32 j)), so every global
// access is a 16-byte load or store and a warp moves 512 contiguous bytes per
// instruction; all of a row's loads are issued before the first use.
//
// dweight/dbias partials stay in registers across the warp's rows; at the end
// the block sums its warps in a fixed order into one partial row
// (LayerNormBwdReduce then sums the blocks' rows in a fixed order:
// deterministic, no atomics).
#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/layernorm_kernels.h"

namespace loom::kernels::cuda::launch {
namespace {

using bf16_t = __nv_bfloat16;

constexpr int kThreads = 256;  // 8 warps, 8 rows in flight per block

using kern::Load8;
using kern::Pack8;
using kern::Unpack8;
using kern::WarpSum;

template <int kVec, bool kRes, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    LayerNormBwdVecKernel(int64_t rows, int cols, const bf16_t* __restrict__ dy, const bf16_t* __restrict__ x,
                          const float* __restrict__ w, const float* __restrict__ mean,
                          const float* __restrict__ rstd, const bf16_t* __restrict__ dres, bf16_t* __restrict__ dx,
                          float* __restrict__ part) {
  // [warps][2 * cols]: each warp's dw and db partials.
  extern __shared__ float4 red4[];
  float* red = reinterpret_cast<float*>(red4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int nv = cols >> 3, stride = 2 * cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float* mine = red + warp * stride;
  float aw[kVec][8], ab[kVec][8];
#pragma unroll
  for (int j = 0; j < kVec; ++j)
#pragma unroll
    for (int k = 0; k < 8; ++k) aw[j][k] = ab[j][k] = 0.0f;

  for (int64_t r = int64_t(blockIdx.x) * nw + warp; r < rows; r += int64_t(gridDim.x) * nw) {
    const int64_t base = r * cols;
    uint4 ud[kVec], ux[kVec], ur[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = lane + 32 * j;
      if (v < nv) {
        ud[j] = *reinterpret_cast<const uint4*>(dy + base + 8 * v);
        ux[j] = *reinterpret_cast<const uint4*>(x + base + 8 * v);
        if (kRes) ur[j] = *reinterpret_cast<const uint4*>(dres + base + 8 * v);
      }
    }
    const float mu = mean[r], rs = rstd[r];
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = lane + 32 * j;
      if (v < nv) {
        float d[8], xv[8], wv[8];
        Unpack8(ud[j], d);
        Unpack8(ux[j], xv);
        Load8(w + 8 * v, wv);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float xh = (xv[k] - mu) * rs, g = d[k] * wv[k];
          s1 += g;
          s2 += g * xh;
          aw[j][k] += d[k] * xh;
          ab[j][k] += d[k];
        }
      }
    }
    const float m1 = WarpSum(s1) * inv_cols, m2 = WarpSum(s2) * inv_cols;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = lane + 32 * j;
      if (v < nv) {
        float d[8], xv[8], wv[8], rv[8], o[8];
        Unpack8(ud[j], d);
        Unpack8(ux[j], xv);
        Load8(w + 8 * v, wv);
        if (kRes) Unpack8(ur[j], rv);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float xh = (xv[k] - mu) * rs;
          o[k] = rs * (d[k] * wv[k] - m1 - xh * m2);
          if (kRes) o[k] += rv[k];
        }
        *reinterpret_cast<uint4*>(dx + base + 8 * v) = Pack8(o);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int v = lane + 32 * j;
    if (v < nv) {
      float4* pw = reinterpret_cast<float4*>(mine + 8 * v);
      float4* pb = reinterpret_cast<float4*>(mine + cols + 8 * v);
      pw[0] = make_float4(aw[j][0], aw[j][1], aw[j][2], aw[j][3]);
      pw[1] = make_float4(aw[j][4], aw[j][5], aw[j][6], aw[j][7]);
      pb[0] = make_float4(ab[j][0], ab[j][1], ab[j][2], ab[j][3]);
      pb[1] = make_float4(ab[j][4], ab[j][5], ab[j][6], ab[j][7]);
    }
  }
  __syncthreads();
  float* p = part + int64_t(blockIdx.x) * stride;
  for (int c = threadIdx.x; c < stride; c += blockDim.x) {
    float s = 0.0f;
    for (int w2 = 0; w2 < nw; ++w2) s += red[w2 * stride + c];
    p[c] = s;
  }
}

template <int kVec, bool kRes, int kMinBlocks>
cudaError_t LaunchVec(int64_t rows, int cols, int64_t max_parts, const void* dy, const void* x, const float* w,
                      const float* mean, const float* rstd, const void* dres, void* dx, float* part,
                      int64_t* parts_used, cudaStream_t s) {
  auto kernel = LayerNormBwdVecKernel<kVec, kRes, kMinBlocks>;
  const size_t smem = size_t(kThreads / 32) * 2 * cols * sizeof(float);
  // The shared-memory opt-in and the occupancy are host queries (and the opt-in
  // is per device): done on the first call for each (device, kernel, shared
  // size), so that later calls (and CUDA graph capture) only launch.
  constexpr int kMaxDevices = 64;
  static int64_t cached_smem[kMaxDevices] = {}, cached_blocks[kMaxDevices] = {};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (cached_smem[dev] != int64_t(smem)) {
    if (smem > 48 * 1024) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e != cudaSuccess) return e;
    }
    int sms = 0, per_sm = 0;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem)) != cudaSuccess) return e;
    cached_blocks[dev] = int64_t(sms) * (per_sm > 0 ? per_sm : 1);
    cached_smem[dev] = int64_t(smem);
  }
  // One wave of resident blocks, no more blocks than 8-row groups, within the workspace.
  int64_t blocks = cached_blocks[dev];
  const int64_t groups = (rows + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks > groups) blocks = groups;
  if (blocks > max_parts) blocks = max_parts;
  *parts_used = blocks;
  kernel<<<unsigned(blocks), kThreads, smem, s>>>(rows, cols, static_cast<const bf16_t*>(dy),
                                                  static_cast<const bf16_t*>(x), w, mean, rstd,
                                                  static_cast<const bf16_t*>(dres), static_cast<bf16_t*>(dx), part);
  return cudaGetLastError();
}

}  // namespace

bool LayerNormBwdVecApplies(int bf16, int64_t cols, const void* dy, const void* x, const float* w, const void* dres,
                            const void* dx) {
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  return bf16 && cols % 8 == 0 && cols >= 8 && cols <= 1024 &&
         ((addr(dy) | addr(x) | addr(w) | addr(dres) | addr(dx)) & 15) == 0;
}

cudaError_t LayerNormBwdVec(int64_t rows, int64_t cols, int64_t max_parts, const void* dy, const void* x,
                            const float* w, const float* mean, const float* rstd, const void* dres, void* dx,
                            float* part, int64_t* parts_used, cudaStream_t s) {
  const int c = int(cols), nv = c / 8;
#define LOOM_LN_BWD_VEC(K)                                                                                     \
  return dres ? LaunchVec<K, true, 2>(rows, c, max_parts, dy, x, w, mean, rstd, dres, dx, part, parts_used, s) \
              : LaunchVec<K, false, 2>(rows, c, max_parts, dy, x, w, mean, rstd, dres, dx, part, parts_used, s);
  if (nv <= 32) { LOOM_LN_BWD_VEC(1) }
  if (nv <= 64) { LOOM_LN_BWD_VEC(2) }
  if (nv <= 96) { LOOM_LN_BWD_VEC(3) }
  LOOM_LN_BWD_VEC(4)
#undef LOOM_LN_BWD_VEC
}

}  // namespace loom::kernels::cuda::launch
