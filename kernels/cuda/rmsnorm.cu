// RMSNorm forward and backward (rmsnorm.h). Two paths, both deterministic
// (fixed-order sums, no atomics):
//  - bf16 rows with cols % 8 == 0, at most kVecMaxCols, every pointer 16-byte
//    aligned: one block per row at a time, each thread holding its 16-byte
//    column vectors (8 values) of the row in registers, so x (and dy) are read
//    once. The backward also keeps its columns' dw partials in registers over
//    the rows its block visits and writes one partial row per block, then
//    sums the blocks' rows in order: dy and x are read once in all (3 passes
//    over [rows, cols] with dx's write, where the other path makes 5).
//  - otherwise: one block per row with element loads; dw through per-chunk
//    column partials that read dy and x again.
#include "kernels/cuda/rmsnorm.h"

#include <algorithm>
#include <initializer_list>

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

constexpr int64_t kVecMaxCols = 8 * 4 * kThreads;  // 4 vectors a thread

// Forward, vector path: thread t owns column vectors t, t + blockDim, ... (at
// most kVec of them); rows grid-stride.
template <int kVec>
__global__ void RmsFwdVecK(int64_t rows, int cols, const bf16* __restrict__ x, const float* __restrict__ w,
                           float eps, bf16* __restrict__ y, float* __restrict__ rstd) {
  const int nv = cols >> 3;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    uint4 ux[kVec];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v < nv) {
        ux[j] = *reinterpret_cast<const uint4*>(x + base + 8 * v);
        float xv[8];
        Unpack8(ux[j], xv);
#pragma unroll
        for (int k = 0; k < 8; ++k) ss += xv[k] * xv[k];
      }
    }
    const float rs = 1.f / sqrtf(BlockSum(ss) / static_cast<float>(cols) + eps);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v < nv) {
        float xv[8], wv[8], o[8];
        Unpack8(ux[j], xv);
        Load8(w + 8 * v, wv);
#pragma unroll
        for (int k = 0; k < 8; ++k) o[k] = xv[k] * rs * wv[k];
        *reinterpret_cast<uint4*>(y + base + 8 * v) = Pack8(o);
      }
    }
    if (threadIdx.x == 0) rstd[r] = rs;
  }
}

// Backward, vector path: dx of each row the block visits, and the block's
// dw partial row (part[blockIdx.x * cols ...]) summed over those rows.
template <int kVec, bool kRes>
__global__ void RmsBwdVecK(int64_t rows, int cols, const bf16* __restrict__ dy, const bf16* __restrict__ x,
                           const float* __restrict__ w, const float* __restrict__ rstd,
                           const bf16* __restrict__ dres, bf16* __restrict__ dx, float* __restrict__ part) {
  const int nv = cols >> 3;
  float aw[kVec][8];
#pragma unroll
  for (int j = 0; j < kVec; ++j)
#pragma unroll
    for (int k = 0; k < 8; ++k) aw[j][k] = 0.f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    const float rs = rstd[r];
    uint4 ud[kVec], ux[kVec];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v < nv) {
        ud[j] = *reinterpret_cast<const uint4*>(dy + base + 8 * v);
        ux[j] = *reinterpret_cast<const uint4*>(x + base + 8 * v);
        float d[8], xv[8], wv[8];
        Unpack8(ud[j], d);
        Unpack8(ux[j], xv);
        Load8(w + 8 * v, wv);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float xh = xv[k] * rs;
          s += d[k] * wv[k] * xh;
          aw[j][k] += d[k] * xh;
        }
      }
    }
    const float mgx = BlockSum(s) / static_cast<float>(cols);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v < nv) {
        float d[8], xv[8], wv[8], o[8], rv[8];
        Unpack8(ud[j], d);
        Unpack8(ux[j], xv);
        Load8(w + 8 * v, wv);
        if (kRes) Unpack8(*reinterpret_cast<const uint4*>(dres + base + 8 * v), rv);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          o[k] = rs * (d[k] * wv[k] - xv[k] * rs * mgx);
          if (kRes) o[k] += rv[k];
        }
        *reinterpret_cast<uint4*>(dx + base + 8 * v) = Pack8(o);
      }
    }
  }
  float* p = part + int64_t(blockIdx.x) * cols;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int v = threadIdx.x + j * blockDim.x;
    if (v < nv) {
      reinterpret_cast<float4*>(p + 8 * v)[0] = make_float4(aw[j][0], aw[j][1], aw[j][2], aw[j][3]);
      reinterpret_cast<float4*>(p + 8 * v)[1] = make_float4(aw[j][4], aw[j][5], aw[j][6], aw[j][7]);
    }
  }
}

bool VecApplies(Dt dt, int64_t cols, std::initializer_list<const void*> ptrs) {
  if (dt != kBF16 || cols % 8 != 0 || cols < 8 || cols > kVecMaxCols) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Threads of a vector-path block: one per column vector, in whole warps, at
// most kThreads; and how many vectors each thread then owns (1, 2 or 4).
int VecThreads(int64_t cols) {
  const int64_t nv = cols / 8, t = (std::min<int64_t>(nv, kThreads) + 31) / 32 * 32;
  return static_cast<int>(t);
}
int VecPerThread(int64_t cols, int threads) {
  const int64_t per = (cols / 8 + threads - 1) / threads;
  return per <= 1 ? 1 : per <= 2 ? 2 : 4;
}

// Blocks of the backward's vector path: about 16 rows each, at most 1024
// (the dw partial rows the workspace holds).
int64_t VecParts(int64_t rows) { return std::clamp<int64_t>((rows + 15) / 16, 1, 1024); }

void LaunchRmsFwdVec(int64_t rows, int64_t cols, const void* x, const float* w, float eps, void* y, float* rstd,
                     cudaStream_t s) {
  const int threads = VecThreads(cols), per = VecPerThread(cols, threads);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
  const bf16* xb = static_cast<const bf16*>(x);
  bf16* yb = static_cast<bf16*>(y);
  const int c = static_cast<int>(cols);
  if (per == 1) RmsFwdVecK<1><<<blocks, threads, 0, s>>>(rows, c, xb, w, eps, yb, rstd);
  else if (per == 2) RmsFwdVecK<2><<<blocks, threads, 0, s>>>(rows, c, xb, w, eps, yb, rstd);
  else RmsFwdVecK<4><<<blocks, threads, 0, s>>>(rows, c, xb, w, eps, yb, rstd);
}

void LaunchRmsBwdVec(int64_t rows, int64_t cols, const void* dy, const void* x, const float* w, const float* rstd,
                     const void* dres, void* dx, float* dw, float* ws, cudaStream_t s) {
  const int threads = VecThreads(cols), per = VecPerThread(cols, threads);
  const int64_t parts = VecParts(rows);
  const unsigned blocks = static_cast<unsigned>(parts);
  const auto* d = static_cast<const bf16*>(dy);
  const auto* xb = static_cast<const bf16*>(x);
  const auto* rb = static_cast<const bf16*>(dres);
  auto* o = static_cast<bf16*>(dx);
  const int c = static_cast<int>(cols);
#define LOOM_RMS_BWD_VEC(K)                                                                  \
  if (dres) RmsBwdVecK<K, true><<<blocks, threads, 0, s>>>(rows, c, d, xb, w, rstd, rb, o, ws); \
  else RmsBwdVecK<K, false><<<blocks, threads, 0, s>>>(rows, c, d, xb, w, rstd, rb, o, ws);
  if (per == 1) {
    LOOM_RMS_BWD_VEC(1)
  } else if (per == 2) {
    LOOM_RMS_BWD_VEC(2)
  } else {
    LOOM_RMS_BWD_VEC(4)
  }
#undef LOOM_RMS_BWD_VEC
  ColumnPartialsSumK<<<static_cast<unsigned>((cols + 31) / 32), 512, 0, s>>>(kF32, parts, cols, ws, dw);
}

}  // namespace

int RmsNormForward(Dt dt, int64_t rows, int64_t cols, const void* x, const float* w, double eps, void* y,
                   float* rstd, Stream s) {
  if (rows <= 0) return 0;
  if (VecApplies(dt, cols, {x, w, y})) {
    LaunchRmsFwdVec(rows, cols, x, w, static_cast<float>(eps), y, rstd, static_cast<cudaStream_t>(s));
    return Err();
  }
  RmsFwdK<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(s)>>>(
      dt, cols, x, w, static_cast<float>(eps), y, rstd);
  return Err();
}

int64_t RmsNormBwdWorkspaceFloats(int64_t rows, int64_t cols) {
  return std::max(SumParts(rows), VecParts(rows)) * cols;
}

int RmsNormBackward(Dt dt, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                    const float* rstd, void* dx, float* dw, float* ws, Stream s, const void* dresidual) {
  if (rows <= 0) return Fill(kF32, cols, 0.0, dw, s);
  cudaStream_t st = static_cast<cudaStream_t>(s);
  if (VecApplies(dt, cols, {dy, x, w, dresidual, dx, dw, ws})) {
    LaunchRmsBwdVec(rows, cols, dy, x, w, rstd, dresidual, dx, dw, ws, st);
    return Err();
  }
  RmsBwdDxK<<<static_cast<unsigned>(rows), kThreads, 0, st>>>(dt, cols, dy, x, w, rstd, dresidual, dx);
  const int64_t parts = SumParts(rows), chunk = (rows + parts - 1) / parts;
  dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(parts));
  RmsBwdDwPartK<<<grid, kThreads, 0, st>>>(dt, rows, cols, chunk, dy, x, rstd, ws);
  ColumnPartialsSumK<<<static_cast<unsigned>((cols + 31) / 32), 512, 0, st>>>(kF32, parts, cols, ws, dw);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
