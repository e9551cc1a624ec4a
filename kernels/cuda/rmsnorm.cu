// RMSNorm forward and backward (rmsnorm.h). Two paths, both deterministic
// (fixed-order sums, no atomics):
//  - rows with cols % 8 == 0, at most kVecMaxCols, every pointer 16-byte
//    aligned, in bf16 (the forward; the backward also with bf16 dy and an f32
//    stream x/dresidual/dx, or all f32): one block per row at a time, each
//    thread holding its 8-column vectors of the row in registers, so x (and
//    dy) are read once. The backward also keeps its columns' dw partials in
//    registers over the rows its block visits and writes one partial row per
//    block, then sums the blocks' rows in order: dy and x are read once in
//    all (3 passes over [rows, cols] with dx's write, where the other path
//    makes 5).
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
// The backward's element path; dx_bf16 (optional) gets dx rounded to bf16.
__global__ void RmsBwdDxK(RmsNormBwdArgs a) {
  const int64_t base = blockIdx.x * a.cols;
  const float rs = a.rstd[blockIdx.x];
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x)
    s += Ld(a.dy, a.dy_dt, base + j) * a.w[j] * Ld(a.x, a.x_dt, base + j) * rs;
  const float mgx = BlockSum(s) / static_cast<float>(a.cols);
  for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
    float g = rs * (Ld(a.dy, a.dy_dt, base + j) * a.w[j] - Ld(a.x, a.x_dt, base + j) * rs * mgx);
    if (a.dresidual) g += Ld(a.dresidual, a.dres_dt, base + j);
    St(a.dx, a.dx_dt, base + j, g);
    if (a.dx_bf16) St(a.dx_bf16, kBF16, base + j, g);
  }
}
__global__ void RmsBwdDwPartK(RmsNormBwdArgs a, int64_t chunk) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= a.cols) return;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(a.rows, r0 + chunk);
  float s = 0.f;
  for (int64_t r = r0; r < r1; ++r)
    s += Ld(a.dy, a.dy_dt, r * a.cols + c) * Ld(a.x, a.x_dt, r * a.cols + c) * a.rstd[r];
  a.workspace[blockIdx.y * a.cols + c] = s;
}

// 8 consecutive values held as loaded (one 16-byte vector of bf16, two of
// f32) and read as floats; Store8 writes 8 floats in T.
template <typename T>
struct Vec8;
template <>
struct Vec8<bf16> {
  uint4 u;
  __device__ __forceinline__ void Load(const bf16* p) { u = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void Get(float* f) const { Unpack8(u, f); }
};
template <>
struct Vec8<float> {
  float4 a, b;
  __device__ __forceinline__ void Load(const float* p) {
    a = reinterpret_cast<const float4*>(p)[0];
    b = reinterpret_cast<const float4*>(p)[1];
  }
  __device__ __forceinline__ void Get(float* f) const {
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
};
__device__ __forceinline__ void Store8(bf16* p, const float* f) { *reinterpret_cast<uint4*>(p) = Pack8(f); }
__device__ __forceinline__ void Store8(float* p, const float* f) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
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
// dw partial row (part[blockIdx.x * cols ...]) summed over those rows. TD:
// dy's type; TS: the stream's (x, dresidual, dx); kCopy: dx16 gets dx in
// bf16 too.
template <int kVec, typename TD, typename TS, bool kRes, bool kCopy>
__global__ void RmsBwdVecK(int64_t rows, int cols, const TD* __restrict__ dy, const TS* __restrict__ x,
                           const float* __restrict__ w, const float* __restrict__ rstd,
                           const TS* __restrict__ dres, TS* __restrict__ dx, bf16* __restrict__ dx16,
                           float* __restrict__ part) {
  const int nv = cols >> 3;
  float aw[kVec][8];
#pragma unroll
  for (int j = 0; j < kVec; ++j)
#pragma unroll
    for (int k = 0; k < 8; ++k) aw[j][k] = 0.f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    const float rs = rstd[r];
    Vec8<TD> ud[kVec];
    Vec8<TS> ux[kVec];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v < nv) {
        ud[j].Load(dy + base + 8 * v);
        ux[j].Load(x + base + 8 * v);
        float d[8], xv[8], wv[8];
        ud[j].Get(d);
        ux[j].Get(xv);
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
        ud[j].Get(d);
        ux[j].Get(xv);
        Load8(w + 8 * v, wv);
        if (kRes) {
          Vec8<TS> ur;
          ur.Load(dres + base + 8 * v);
          ur.Get(rv);
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          o[k] = rs * (d[k] * wv[k] - xv[k] * rs * mgx);
          if (kRes) o[k] += rv[k];
        }
        Store8(dx + base + 8 * v, o);
        if (kCopy) Store8(dx16 + base + 8 * v, o);
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

bool Aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

bool VecCols(int64_t cols) { return cols % 8 == 0 && cols >= 8 && cols <= kVecMaxCols; }

// The forward's vector path: bf16.
bool VecApplies(Dt dt, int64_t cols, std::initializer_list<const void*> ptrs) {
  return dt == kBF16 && VecCols(cols) && Aligned(ptrs);
}

// The backward's vector path: the dtypes of one instantiation (dy bf16 with
// a bf16 or f32 stream, or everything f32; a bf16 copy of an f32 dx) and
// 16-byte aligned operands.
bool BwdVecApplies(const RmsNormBwdArgs& a) {
  const bool stream_f32 = a.x_dt == kF32 && a.dx_dt == kF32 && (!a.dresidual || a.dres_dt == kF32);
  const bool stream_bf16 = a.x_dt == kBF16 && a.dx_dt == kBF16 && (!a.dresidual || a.dres_dt == kBF16);
  const bool types = (a.dy_dt == kBF16 && (stream_f32 || (stream_bf16 && !a.dx_bf16))) ||
                     (a.dy_dt == kF32 && stream_f32 && !a.dx_bf16);
  return types && VecCols(a.cols) &&
         Aligned({a.dy, a.x, a.w, a.dresidual, a.dx, a.dx_bf16, a.dw, a.workspace});
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

template <int kVec, typename TD, typename TS, bool kCopy>
void LaunchRmsBwdVecAs(const RmsNormBwdArgs& a, unsigned blocks, int threads, cudaStream_t s) {
  const auto* d = static_cast<const TD*>(a.dy);
  const auto* x = static_cast<const TS*>(a.x);
  const auto* r = static_cast<const TS*>(a.dresidual);
  auto* o = static_cast<TS*>(a.dx);
  auto* o16 = static_cast<bf16*>(a.dx_bf16);
  const int c = static_cast<int>(a.cols);
  auto* kernel = r ? RmsBwdVecK<kVec, TD, TS, true, kCopy> : RmsBwdVecK<kVec, TD, TS, false, kCopy>;
  kernel<<<blocks, threads, 0, s>>>(a.rows, c, d, x, a.w, a.rstd, r, o, o16, a.workspace);
}

template <int kVec>
void LaunchRmsBwdVecK(const RmsNormBwdArgs& a, unsigned blocks, int threads, cudaStream_t s) {
  if (a.dy_dt == kF32) LaunchRmsBwdVecAs<kVec, float, float, false>(a, blocks, threads, s);
  else if (a.x_dt == kBF16) LaunchRmsBwdVecAs<kVec, bf16, bf16, false>(a, blocks, threads, s);
  else if (a.dx_bf16) LaunchRmsBwdVecAs<kVec, bf16, float, true>(a, blocks, threads, s);
  else LaunchRmsBwdVecAs<kVec, bf16, float, false>(a, blocks, threads, s);
}

void LaunchRmsBwdVec(const RmsNormBwdArgs& a, cudaStream_t s) {
  const int threads = VecThreads(a.cols), per = VecPerThread(a.cols, threads);
  const int64_t parts = VecParts(a.rows);
  const unsigned blocks = static_cast<unsigned>(parts);
  if (per == 1) LaunchRmsBwdVecK<1>(a, blocks, threads, s);
  else if (per == 2) LaunchRmsBwdVecK<2>(a, blocks, threads, s);
  else LaunchRmsBwdVecK<4>(a, blocks, threads, s);
  ColumnPartialsSumK<<<static_cast<unsigned>((a.cols + 31) / 32), 512, 0, s>>>(kF32, parts, a.cols, a.workspace, a.dw);
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

int RmsNormBackward(const RmsNormBwdArgs& a) {
  cudaStream_t st = static_cast<cudaStream_t>(a.stream);
  if (a.rows <= 0) return Fill(kF32, a.cols, 0.0, a.dw, a.stream);
  if (BwdVecApplies(a)) {
    LaunchRmsBwdVec(a, st);
    return Err();
  }
  RmsBwdDxK<<<static_cast<unsigned>(a.rows), kThreads, 0, st>>>(a);
  const int64_t parts = SumParts(a.rows), chunk = (a.rows + parts - 1) / parts;
  dim3 grid(static_cast<unsigned>((a.cols + kThreads - 1) / kThreads), static_cast<unsigned>(parts));
  RmsBwdDwPartK<<<grid, kThreads, 0, st>>>(a, chunk);
  ColumnPartialsSumK<<<static_cast<unsigned>((a.cols + 31) / 32), 512, 0, st>>>(kF32, parts, a.cols, a.workspace, a.dw);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
