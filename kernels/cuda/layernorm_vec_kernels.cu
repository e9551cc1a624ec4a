// LayerNorm forward and backward for bf16 rows of at most 1024 columns with
// cols % 8 == 0 and 16-byte aligned operands (the GPT shapes): see
// LayerNormFwdVec / LayerNormBwdVec in ops_kernels.h. One warp per row, each
// lane owning kVec 16-byte column vectors (8 bf16 values each, column
// 8 * (lane + 32 j)), so every global access is a 16-byte load or store and a
// warp moves 512 contiguous bytes per instruction; all of a row's loads are
// issued before the first use.
//
// Backward: dweight/dbias partials stay in registers across the warp's rows
// (or in the warp's shared-memory row, kSmemAcc); at the end the block sums its
// warps in a fixed order into one partial row (LayerNormBwdReduce then sums the
// blocks' rows in a fixed order: deterministic, no atomics).
#include <cuda_bf16.h>

#include <cstdlib>

#include "kernels/cuda/ops_kernels.h"

namespace loom::cuda::launch {
namespace {

using bf16_t = __nv_bfloat16;

constexpr int kThreads = 256;  // 8 warps, 8 rows in flight per block

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ void Unpack8(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 t = __bfloat1622float2(h[k]);
    f[2 * k] = t.x;
    f[2 * k + 1] = t.y;
  }
}
__device__ __forceinline__ uint4 Pack8(const float* f) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  return u;
}
__device__ __forceinline__ void Store8(float* p, const float* f) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
__device__ __forceinline__ void Load8(const float* p, float* f) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

template <int kVec, bool kRes>
__global__ void __launch_bounds__(kThreads)
    LayerNormFwdVecKernel(int64_t rows, int cols, const bf16_t* __restrict__ x, const bf16_t* __restrict__ res,
                          bf16_t* __restrict__ xsum, const float* __restrict__ w, const float* __restrict__ b,
                          bf16_t* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int nv = cols >> 3;
  const int64_t base = r * cols;
  uint4 ux[kVec], ur[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int v = lane + 32 * j;
    if (v < nv) {
      ux[j] = *reinterpret_cast<const uint4*>(x + base + 8 * v);
      if (kRes) ur[j] = *reinterpret_cast<const uint4*>(res + base + 8 * v);
    }
  }
  float val[kVec][8];
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int v = lane + 32 * j;
#pragma unroll
    for (int k = 0; k < 8; ++k) val[j][k] = 0.0f;
    if (v < nv) {
      Unpack8(ux[j], val[j]);
      if (kRes) {  // the residual stream, rounded to bf16 as stored; the norm is of it
        float rv[8];
        Unpack8(ur[j], rv);
#pragma unroll
        for (int k = 0; k < 8; ++k) val[j][k] += rv[k];
        const uint4 packed = Pack8(val[j]);
        *reinterpret_cast<uint4*>(xsum + base + 8 * v) = packed;
        Unpack8(packed, val[j]);
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) s += val[j][k];
    }
  }
  const float mu = WarpSum(s) / cols;
  float q = 0.0f;
#pragma unroll
  for (int j = 0; j < kVec; ++j)
    if (lane + 32 * j < nv)
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float d = val[j][k] - mu;
        q += d * d;
      }
  const float rs = rsqrtf(WarpSum(q) / cols + eps);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int v = lane + 32 * j;
    if (v < nv) {
      float wv[8], bv[8], o[8];
      Load8(w + 8 * v, wv);
      if (b) Load8(b + 8 * v, bv);
#pragma unroll
      for (int k = 0; k < 8; ++k) o[k] = (val[j][k] - mu) * rs * wv[k] + (b ? bv[k] : 0.0f);
      *reinterpret_cast<uint4*>(y + base + 8 * v) = Pack8(o);
    }
  }
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// kSmemAcc: the dw/db partials live in the warp's shared-memory row instead of
// registers (each lane updates only its own columns: no barrier in the row
// loop), which frees ~48 registers for more resident warps.
template <int kVec, bool kRes, bool kSmemAcc, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    LayerNormBwdVecKernel(int64_t rows, int cols, const bf16_t* __restrict__ dy, const bf16_t* __restrict__ x,
                          const float* __restrict__ w, const float* __restrict__ mean,
                          const float* __restrict__ rstd, const bf16_t* __restrict__ dres, bf16_t* __restrict__ dx,
                          float* __restrict__ part, int nacc) {
  // [warps][nacc * cols]: each warp's dw, db (and, nacc == 3, dx column-sum) partials.
  // nacc == 3 only with kSmemAcc.
  extern __shared__ float4 red4[];
  float* red = reinterpret_cast<float*>(red4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int nv = cols >> 3, stride = nacc * cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float* mine = red + warp * stride;
  float aw[kSmemAcc ? 1 : kVec][8], ab[kSmemAcc ? 1 : kVec][8];
  if (kSmemAcc) {
    for (int c = lane; c < stride; c += 32) mine[c] = 0.0f;
    __syncwarp();
  } else {
#pragma unroll
    for (int j = 0; j < (kSmemAcc ? 1 : kVec); ++j)
#pragma unroll
      for (int k = 0; k < 8; ++k) aw[j][k] = ab[j][k] = 0.0f;
  }

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
        float tw[8], tb[8];
        if (kSmemAcc) {
          Load8(mine + 8 * v, tw);
          Load8(mine + cols + 8 * v, tb);
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float xh = (xv[k] - mu) * rs, g = d[k] * wv[k];
          s1 += g;
          s2 += g * xh;
          if (kSmemAcc) {
            tw[k] += d[k] * xh;
            tb[k] += d[k];
          } else {
            aw[kSmemAcc ? 0 : j][k] += d[k] * xh;
            ab[kSmemAcc ? 0 : j][k] += d[k];
          }
        }
        if (kSmemAcc) {
          Store8(mine + 8 * v, tw);
          Store8(mine + cols + 8 * v, tb);
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
        const uint4 packed = Pack8(o);
        *reinterpret_cast<uint4*>(dx + base + 8 * v) = packed;
        if (kSmemAcc && nacc == 3) {  // column sums of dx as stored (bf16-rounded)
          float t[8], q[8];
          Unpack8(packed, q);
          Load8(mine + 2 * cols + 8 * v, t);
#pragma unroll
          for (int k = 0; k < 8; ++k) t[k] += q[k];
          Store8(mine + 2 * cols + 8 * v, t);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int v = lane + 32 * j;
    if (!kSmemAcc && v < nv) {
      float4* pw = reinterpret_cast<float4*>(mine + 8 * v);
      float4* pb = reinterpret_cast<float4*>(mine + cols + 8 * v);
      const int q = kSmemAcc ? 0 : j;
      pw[0] = make_float4(aw[q][0], aw[q][1], aw[q][2], aw[q][3]);
      pw[1] = make_float4(aw[q][4], aw[q][5], aw[q][6], aw[q][7]);
      pb[0] = make_float4(ab[q][0], ab[q][1], ab[q][2], ab[q][3]);
      pb[1] = make_float4(ab[q][4], ab[q][5], ab[q][6], ab[q][7]);
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

template <int kVec, bool kRes, bool kSmemAcc, int kMinBlocks>
cudaError_t LaunchVec(int64_t rows, int cols, int64_t max_parts, const void* dy, const void* x, const float* w,
                      const float* mean, const float* rstd, const void* dres, void* dx, float* part, int nacc,
                      int64_t* parts_used, cudaStream_t s) {
  auto kernel = LayerNormBwdVecKernel<kVec, kRes, kSmemAcc, kMinBlocks>;
  const size_t smem = size_t(kThreads / 32) * nacc * cols * sizeof(float);
  // The shared-memory opt-in and the occupancy are host queries (and the opt-in
  // is per device): done on the first call for each (device, kernel, shared
  // size), so that later calls (and CUDA graph capture) only launch.
  constexpr int kMaxDevices = 64;
  static int64_t cached_smem[kMaxDevices][2] = {}, cached_blocks[kMaxDevices][2] = {};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  const int slot = smem > size_t(kThreads / 32) * 2 * cols * sizeof(float) ? 1 : 0;
  if (cached_smem[dev][slot] != int64_t(smem)) {
    if (smem > 48 * 1024) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e != cudaSuccess) return e;
    }
    int sms = 0, per_sm = 0;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem)) != cudaSuccess) return e;
    cached_blocks[dev][slot] = int64_t(sms) * (per_sm > 0 ? per_sm : 1);
    cached_smem[dev][slot] = int64_t(smem);
  }
  // One wave of resident blocks, no more blocks than 8-row groups, within the workspace.
  int64_t blocks = cached_blocks[dev][slot];
  const int64_t groups = (rows + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks > groups) blocks = groups;
  if (blocks > max_parts) blocks = max_parts;
  *parts_used = blocks;
  kernel<<<unsigned(blocks), kThreads, smem, s>>>(rows, cols, static_cast<const bf16_t*>(dy),
                                                  static_cast<const bf16_t*>(x), w, mean, rstd,
                                                  static_cast<const bf16_t*>(dres), static_cast<bf16_t*>(dx), part,
                                                  nacc);
  return cudaGetLastError();
}

}  // namespace

bool LayerNormFwdVecApplies(int bf16, int64_t cols, const void* x, const void* res, const void* xsum,
                            const float* w, const float* b, const void* y) {
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  return bf16 && cols % 8 == 0 && cols >= 8 && cols <= 1024 &&
         ((addr(x) | addr(res) | addr(xsum) | addr(w) | addr(b) | addr(y)) & 15) == 0;
}

cudaError_t LayerNormFwdVec(int64_t rows, int64_t cols, const void* x, const void* res, void* xsum, const float* w,
                            const float* b, void* y, float* mean, float* rstd, float eps, cudaStream_t s) {
  const int c = int(cols), nv = c / 8;
  const unsigned blocks = unsigned((rows + kThreads / 32 - 1) / (kThreads / 32));
  const auto X = static_cast<const bf16_t*>(x);
  const auto R = static_cast<const bf16_t*>(res);
  const auto XS = static_cast<bf16_t*>(xsum);
  const auto Y = static_cast<bf16_t*>(y);
#define LOOM_LN_FWD_VEC(K)                                                                                     \
  if (res)                                                                                                     \
    LayerNormFwdVecKernel<K, true><<<blocks, kThreads, 0, s>>>(rows, c, X, R, XS, w, b, Y, mean, rstd, eps);   \
  else                                                                                                         \
    LayerNormFwdVecKernel<K, false><<<blocks, kThreads, 0, s>>>(rows, c, X, R, XS, w, b, Y, mean, rstd, eps);  \
  return cudaGetLastError();
  if (nv <= 32) { LOOM_LN_FWD_VEC(1) }
  if (nv <= 64) { LOOM_LN_FWD_VEC(2) }
  if (nv <= 96) { LOOM_LN_FWD_VEC(3) }
  LOOM_LN_FWD_VEC(4)
#undef LOOM_LN_FWD_VEC
}

bool LayerNormBwdVecApplies(int bf16, int64_t cols, const void* dy, const void* x, const float* w, const void* dres,
                            const void* dx) {
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  return bf16 && cols % 8 == 0 && cols >= 8 && cols <= 1024 &&
         ((addr(dy) | addr(x) | addr(w) | addr(dres) | addr(dx)) & 15) == 0;
}

cudaError_t LayerNormBwdVec(int64_t rows, int64_t cols, int64_t max_parts, const void* dy, const void* x,
                            const float* w, const float* mean, const float* rstd, const void* dres, void* dx,
                            bool colsum, float* part, int64_t* parts_used, cudaStream_t s) {
  // LOOM_CUDA_LN_BWD_VEC=2: partials in shared memory, 3 blocks per SM (A/B).
  // The dx column sums (colsum) always take the shared-memory kernel.
  static const bool smem_env = [] {
    const char* v = std::getenv("LOOM_CUDA_LN_BWD_VEC");
    return v && v[0] == '2';
  }();
  const bool smem_acc = smem_env || colsum;
  const int c = int(cols), nv = c / 8, nacc = colsum ? 3 : 2;
#define LOOM_LN_BWD_VEC(K)                                                                                      \
  if (smem_acc)                                                                                                 \
    return dres ? LaunchVec<K, true, true, 3>(rows, c, max_parts, dy, x, w, mean, rstd, dres, dx, part, nacc,   \
                                              parts_used, s)                                                    \
                : LaunchVec<K, false, true, 3>(rows, c, max_parts, dy, x, w, mean, rstd, dres, dx, part, nacc,  \
                                               parts_used, s);                                                  \
  return dres ? LaunchVec<K, true, false, 2>(rows, c, max_parts, dy, x, w, mean, rstd, dres, dx, part, 2,       \
                                             parts_used, s)                                                     \
              : LaunchVec<K, false, false, 2>(rows, c, max_parts, dy, x, w, mean, rstd, dres, dx, part, 2,      \
                                              parts_used, s);
  if (nv <= 32) { LOOM_LN_BWD_VEC(1) }
  if (nv <= 64) { LOOM_LN_BWD_VEC(2) }
  if (nv <= 96) { LOOM_LN_BWD_VEC(3) }
  LOOM_LN_BWD_VEC(4)
#undef LOOM_LN_BWD_VEC
}

}  // namespace loom::cuda::launch
