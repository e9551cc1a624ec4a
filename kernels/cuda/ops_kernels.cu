// CUDA kernels behind ops.h (sm_90). Plain, correct-first implementations:
// grid-stride elementwise, one block per row for norms and cross-entropy, two
// passes over a row held in L1/L2, block reductions by warp shuffles, and a
// chunk table for the multi-tensor AdamW. bf16 values are read and computed in
// f32 and rounded once on store (round-to-nearest-even).
#include <cuda_bf16.h>

#include <cstdlib>

#include "kernels/cuda/ops_kernels.h"

namespace loom::cuda::launch {
namespace {

using bf16_t = __nv_bfloat16;

__device__ __forceinline__ float Ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Ld(const bf16_t* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void St(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void St(bf16_t* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
// v rounded to T's precision (what a store and reload would give).
template <typename T>
__device__ __forceinline__ float Round(float v);
template <>
__device__ __forceinline__ float Round<float>(float v) { return v; }
template <>
__device__ __forceinline__ float Round<bf16_t>(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum/max; sh holds 32 floats; every thread gets the result.
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
__device__ float BlockMax(float v, float* sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    float r = lane < nw ? sh[lane] : -INFINITY;
    r = WarpMax(r);
    if (lane == 0) sh[0] = r;
  }
  __syncthreads();
  return sh[0];
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

__device__ __forceinline__ float GeluTanh(float x) {
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluC * x * x * x)));
}
__device__ __forceinline__ float DGeluTanh(float x) {
  float u = kSqrt2OverPi * (x + kGeluC * x * x * x);
  float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluC * x * x);
}
__device__ __forceinline__ float GeluErf(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
__device__ __forceinline__ float DGeluErf(float x) {
  return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * __expf(-0.5f * x * x);
}

template <typename T, int OP>
__global__ void ElementwiseKernel(int64_t n, const T* a, const T* b, T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float x = Ld(a, i), r;
    if (OP == kAdd) r = x + Ld(b, i);
    else if (OP == kMul) r = x * Ld(b, i);
    else if (OP == kGeluTanh) r = GeluTanh(x);
    else if (OP == kGeluErf) r = GeluErf(x);
    else if (OP == kDGeluTanh) r = Ld(b, i) * DGeluTanh(x);
    else r = Ld(b, i) * DGeluErf(x);
    St(out, i, r);
  }
}

template <typename T>
cudaError_t ElementwiseT(int op, int64_t n, const void* a, const void* b, void* out, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 132 * 32) blocks = 132 * 32;
  auto A = static_cast<const T*>(a);
  auto B = static_cast<const T*>(b);
  auto O = static_cast<T*>(out);
  switch (op) {
    case kAdd: ElementwiseKernel<T, kAdd><<<blocks, threads, 0, s>>>(n, A, B, O); break;
    case kMul: ElementwiseKernel<T, kMul><<<blocks, threads, 0, s>>>(n, A, B, O); break;
    case kGeluTanh: ElementwiseKernel<T, kGeluTanh><<<blocks, threads, 0, s>>>(n, A, B, O); break;
    case kGeluErf: ElementwiseKernel<T, kGeluErf><<<blocks, threads, 0, s>>>(n, A, B, O); break;
    case kDGeluTanh: ElementwiseKernel<T, kDGeluTanh><<<blocks, threads, 0, s>>>(n, A, B, O); break;
    case kDGeluErf: ElementwiseKernel<T, kDGeluErf><<<blocks, threads, 0, s>>>(n, A, B, O); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// ---- LayerNorm -------------------------------------------------------------------
template <typename T>
__global__ void LayerNormFwdKernel(int64_t cols, const T* x, const T* res, T* xsum, const float* w,
                                   const float* b, T* y, float* mean, float* rstd, float eps) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * cols;
  const T* rr = res ? res + r * cols : nullptr;
  T* sr = xsum ? xsum + r * cols : nullptr;
  const T* src = res ? sr : xr;  // what is normalised
  float s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v;
    if (res) {
      v = Round<T>(Ld(xr, c) + Ld(rr, c));
      St(sr, c, v);
    } else {
      v = Ld(xr, c);
    }
    s += v;
  }
  const float mu = BlockSum(s, sh) / cols;
  float q = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float d = Ld(src, c) - mu;  // each thread re-reads only what it wrote
    q += d * d;
  }
  const float rs = rsqrtf(BlockSum(q, sh) / cols + eps);
  T* yr = y + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = (Ld(src, c) - mu) * rs * w[c] + (b ? b[c] : 0.0f);
    St(yr, c, v);
  }
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// Rows of at most kWarpRowMaxCols columns: one warp per row, the row's values
// in registers (kPer per lane, column lane + 32 j), reductions by shuffles only
// (no __syncthreads in the row loop). The block-per-row kernels above and below
// serve wider rows.
constexpr int kWarpRowMaxCols = 1024;

template <typename T, int kPer>
__global__ void LayerNormFwdWarpKernel(int64_t rows, int cols, const T* x, const T* res, T* xsum, const float* w,
                                       const float* b, T* y, float* mean, float* rstd, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;
  const T* xr = x + r * cols;
  float v[kPer];
  float s = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = lane + 32 * j;
    float t = 0;
    if (c < cols) {
      t = Ld(xr, c);
      if (res) {
        t = Round<T>(t + Ld(res + r * cols, c));
        St(xsum + r * cols, c, t);
      }
    }
    v[j] = t;
    s += t;
  }
  const float mu = WarpSum(s) / cols;
  float q = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const float d = lane + 32 * j < cols ? v[j] - mu : 0.0f;
    q += d * d;
  }
  const float rs = rsqrtf(WarpSum(q) / cols + eps);
  T* yr = y + r * cols;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = lane + 32 * j;
    if (c < cols) St(yr, c, (v[j] - mu) * rs * w[c] + (b ? b[c] : 0.0f));
  }
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// dw/db partials stay in registers across the warp's rows; the block's warps
// then add theirs into shared memory one warp at a time (deterministic) and
// the block writes one partial row, as the block kernel does.
// kSum: also the column sums of dx (nacc = 3), a template flag so that the
// plain kernel keeps its register count (24 more live floats otherwise).
template <typename T, int kPer, bool kSum>
__global__ void LayerNormBwdWarpKernel(int64_t rows, int cols, const T* dy, const T* x, const float* w,
                                       const float* mean, const float* rstd, const T* dres, T* dx, float* part) {
  constexpr int nacc = kSum ? 3 : 2;
  extern __shared__ float acc[];  // [nacc*cols]: dw, db[, dx column sums]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  float aw[kPer], ab[kPer], as[kSum ? kPer : 1];
#pragma unroll
  for (int j = 0; j < kPer; ++j) aw[j] = ab[j] = as[kSum ? j : 0] = 0.0f;
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
        if (kSum) as[kSum ? j : 0] += Round<T>(v);
      }
    }
  }
  for (int c = threadIdx.x; c < nacc * cols; c += blockDim.x) acc[c] = 0.0f;
  __syncthreads();
  for (int w2 = 0; w2 < nw; ++w2) {
    if (warp == w2) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int c = lane + 32 * j;
        if (c < cols) {
          acc[c] += aw[j];
          acc[cols + c] += ab[j];
          if (kSum) acc[2 * cols + c] += as[kSum ? j : 0];
        }
      }
    }
    __syncthreads();
  }
  float* p = part + int64_t(blockIdx.x) * nacc * cols;
  for (int c = threadIdx.x; c < nacc * cols; c += blockDim.x) p[c] = acc[c];
}

// Partial rows the workspace holds (the vectorised kernel uses up to one per
// resident block); the scalar kernels use at most kLnBwdScalarParts.
constexpr int64_t kLnBwdMaxParts = 512;
constexpr int64_t kLnBwdScalarParts = 256;

template <typename T>
__global__ void LayerNormBwdKernel(int64_t rows, int64_t cols, const T* dy, const T* x, const float* w,
                                   const float* mean, const float* rstd, const T* dres, T* dx, float* part,
                                   int nacc) {
  extern __shared__ float acc[];  // [nacc*cols]: dw partials, db partials[, dx column sums]
  __shared__ float sh[32];
  for (int64_t c = threadIdx.x; c < nacc * cols; c += blockDim.x) acc[c] = 0.0f;
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
      if (nacc == 3) acc[2 * cols + c] += Round<T>(v);
    }
  }
  // acc[cols + c] and acc[2 cols + c] were summed by the thread owning c, which
  // is not the thread that copies them out when cols % blockDim != 0.
  __syncthreads();
  float* p = part + blockIdx.x * nacc * cols;
  for (int64_t c = threadIdx.x; c < nacc * cols; c += blockDim.x) p[c] = acc[c];
}

// Sums the per-block partials: 32 columns per block, 16 threads down each
// column taking every 16th part, then a fixed-order sum of their 16 results
// (deterministic). One thread per column walking all parts serially was
// latency-bound (~100 us at 256 parts).
// blockIdx.y picks the partial: 0 dw, 1 db, 2 the dx column sums (nacc == 3).
__global__ void LayerNormBwdReduce(int64_t cols, int64_t parts, int nacc, const float* part, float* dw, float* db,
                                   float* dsum) {
  __shared__ float sw[16][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, which = blockIdx.y;
  float* out = which == 0 ? dw : which == 1 ? db : dsum;
  if (!out) return;  // uniform per block
  const int64_t c = blockIdx.x * 32 + tx;
  const int64_t stride = nacc * cols, off = which * cols + c;
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

// ---- Cross-entropy ---------------------------------------------------------------
template <typename T>
__global__ void CrossEntropyFwdKernel(int64_t vocab, const T* logits, const int32_t* t, float* losses,
                                      float* lse) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const T* x = logits + r * vocab;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) mx = fmaxf(mx, Ld(x, c));
  mx = BlockMax(mx, sh);
  float s = 0;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) s += __expf(Ld(x, c) - mx);
  s = BlockSum(s, sh);
  if (threadIdx.x == 0) {
    const float l = mx + logf(s);
    lse[r] = l;
    const int32_t tr = t[r];
    if (tr < 0) losses[r] = 0.0f;
    else if (tr >= vocab) losses[r] = NAN;  // bad target: visible, never silent
    else losses[r] = l - Ld(x, tr);
  }
}

template <typename T>
__global__ void CrossEntropyBwdKernel(int64_t vocab, const T* logits, const int32_t* t, const float* lse,
                                      float scale, T* dlogits) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * vocab;
  T* d = dlogits + r * vocab;
  const int32_t tr = t[r];
  const float l = lse[r];
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
    float v = tr < 0 ? 0.0f : scale * (__expf(Ld(x, c) - l) - (c == tr ? 1.0f : 0.0f));
    St(d, c, v);
  }
}

// ---- AdamW -----------------------------------------------------------------------
template <typename G>
__global__ void AdamWKernel(const AdamWDesc* descs, const AdamWChunk* chunks, float lr, float b1, float b2,
                            float eps, float wd, float bc1, float bc2_sqrt) {
  const AdamWChunk ch = chunks[blockIdx.x];
  const AdamWDesc d = descs[ch.tensor];
  const G* g = static_cast<const G*>(d.g);
  bf16_t* pb = static_cast<bf16_t*>(d.p_bf16);
  int64_t end = ch.start + kAdamWChunk;
  if (end > d.n) end = d.n;
  const float step = lr / bc1;
  for (int64_t i = ch.start + threadIdx.x; i < end; i += blockDim.x) {
    float p = d.p[i];
    if (d.decay) p -= lr * wd * p;
    const float gi = Ld(g, i);
    const float m = b1 * d.m[i] + (1.0f - b1) * gi;
    const float v = b2 * d.v[i] + (1.0f - b2) * gi * gi;
    p -= step * m / (sqrtf(v) / bc2_sqrt + eps);
    d.m[i] = m;
    d.v[i] = v;
    d.p[i] = p;
    if (pb) pb[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace

cudaError_t Elementwise(int op, int bf16, int64_t n, const void* a, const void* b, void* out, cudaStream_t s) {
  return bf16 ? ElementwiseT<bf16_t>(op, n, a, b, out, s) : ElementwiseT<float>(op, n, a, b, out, s);
}

static int RowThreads(int64_t cols) { return cols >= 4096 ? 1024 : cols >= 1024 ? 512 : 256; }

cudaError_t LayerNormFwd(int bf16, int64_t rows, int64_t cols, const void* x, const void* residual, void* x_sum,
                         const float* w, const float* b, void* y, float* mean, float* rstd, float eps,
                         cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  // LOOM_CUDA_LN_FWD_VEC=0 keeps the scalar kernels below (for A/B timing).
  static const bool vec_on = [] {
    const char* v = std::getenv("LOOM_CUDA_LN_FWD_VEC");
    return !(v && v[0] == '0');
  }();
  if (vec_on && LayerNormFwdVecApplies(bf16, cols, x, residual, x_sum, w, b, y))
    return LayerNormFwdVec(rows, cols, x, residual, x_sum, w, b, y, mean, rstd, eps, s);
  if (cols <= kWarpRowMaxCols) {
    const unsigned blocks = unsigned((rows + 7) / 8);  // 8 warps (rows) per block
    const int c = int(cols);
#define LOOM_LN_FWD(K)                                                                                       \
  if (bf16)                                                                                                  \
    LayerNormFwdWarpKernel<bf16_t, K><<<blocks, 256, 0, s>>>(                                                \
        rows, c, static_cast<const bf16_t*>(x), static_cast<const bf16_t*>(residual), static_cast<bf16_t*>(x_sum), \
        w, b, static_cast<bf16_t*>(y), mean, rstd, eps);                                                     \
  else                                                                                                       \
    LayerNormFwdWarpKernel<float, K><<<blocks, 256, 0, s>>>(rows, c, static_cast<const float*>(x),            \
                                                            static_cast<const float*>(residual),              \
                                                            static_cast<float*>(x_sum), w, b,                 \
                                                            static_cast<float*>(y), mean, rstd, eps);
    if (cols <= 256) { LOOM_LN_FWD(8) } else if (cols <= 512) { LOOM_LN_FWD(16) }
    else if (cols <= 768) { LOOM_LN_FWD(24) } else { LOOM_LN_FWD(32) }
#undef LOOM_LN_FWD
    return cudaGetLastError();
  }
  const int th = RowThreads(cols);
  if (bf16)
    LayerNormFwdKernel<bf16_t><<<rows, th, 0, s>>>(cols, static_cast<const bf16_t*>(x),
                                                   static_cast<const bf16_t*>(residual), static_cast<bf16_t*>(x_sum),
                                                   w, b, static_cast<bf16_t*>(y), mean, rstd, eps);
  else
    LayerNormFwdKernel<float><<<rows, th, 0, s>>>(cols, static_cast<const float*>(x),
                                                  static_cast<const float*>(residual), static_cast<float*>(x_sum), w,
                                                  b, static_cast<float*>(y), mean, rstd, eps);
  return cudaGetLastError();
}

int64_t LayerNormBwdParts(int64_t rows) { return rows < kLnBwdMaxParts ? rows : kLnBwdMaxParts; }

cudaError_t LayerNormBwd(int bf16, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                         const float* mean, const float* rstd, const void* dres, void* dx, float* dw, float* db,
                         float* dsum, float* workspace, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t max_parts = LayerNormBwdParts(rows);
  const int64_t parts = max_parts < kLnBwdScalarParts ? max_parts : kLnBwdScalarParts;  // scalar kernels
  const int nacc = dsum ? 3 : 2;
  const size_t smem = size_t(nacc * cols) * sizeof(float);
  const int th = RowThreads(cols);
  const dim3 reduce_grid(unsigned((cols + 31) / 32), unsigned(nacc));
  cudaError_t e;
  // LOOM_CUDA_LN_BWD_VEC=0 keeps the scalar kernels below (for A/B timing).
  static const bool vec_on = [] {
    const char* v = std::getenv("LOOM_CUDA_LN_BWD_VEC");
    return !(v && v[0] == '0');
  }();
  if (vec_on && LayerNormBwdVecApplies(bf16, cols, dy, x, w, dres, dx)) {
    int64_t used = 0;
    e = LayerNormBwdVec(rows, cols, max_parts, dy, x, w, mean, rstd, dres, dx, dsum != nullptr, workspace, &used,
                        s);
    if (e != cudaSuccess) return e;
    LayerNormBwdReduce<<<reduce_grid, 512, 0, s>>>(cols, used, nacc, workspace, dw, db, dsum);
    return cudaGetLastError();
  }
  if (cols <= kWarpRowMaxCols) {
    const int c = int(cols);
#define LOOM_LN_BWD_T(T, K, S)                                                                                \
  LayerNormBwdWarpKernel<T, K, S><<<unsigned(parts), 256, smem, s>>>(                                         \
      rows, c, static_cast<const T*>(dy), static_cast<const T*>(x), w, mean, rstd, static_cast<const T*>(dres), \
      static_cast<T*>(dx), workspace);
#define LOOM_LN_BWD(K)                                                                                        \
  if (bf16 && dsum) { LOOM_LN_BWD_T(bf16_t, K, true) }                                                        \
  else if (bf16) { LOOM_LN_BWD_T(bf16_t, K, false) }                                                          \
  else if (dsum) { LOOM_LN_BWD_T(float, K, true) }                                                            \
  else { LOOM_LN_BWD_T(float, K, false) }
    if (cols <= 256) { LOOM_LN_BWD(8) } else if (cols <= 512) { LOOM_LN_BWD(16) }
    else if (cols <= 768) { LOOM_LN_BWD(24) } else { LOOM_LN_BWD(32) }
#undef LOOM_LN_BWD
#undef LOOM_LN_BWD_T
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    LayerNormBwdReduce<<<reduce_grid, 512, 0, s>>>(cols, parts, nacc, workspace, dw, db, dsum);
    return cudaGetLastError();
  }
  if (bf16) {
    e = cudaFuncSetAttribute(LayerNormBwdKernel<bf16_t>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    LayerNormBwdKernel<bf16_t><<<parts, th, smem, s>>>(
        rows, cols, static_cast<const bf16_t*>(dy), static_cast<const bf16_t*>(x), w, mean, rstd,
        static_cast<const bf16_t*>(dres), static_cast<bf16_t*>(dx), workspace, nacc);
  } else {
    e = cudaFuncSetAttribute(LayerNormBwdKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    LayerNormBwdKernel<float><<<parts, th, smem, s>>>(rows, cols, static_cast<const float*>(dy),
                                                      static_cast<const float*>(x), w, mean, rstd,
                                                      static_cast<const float*>(dres), static_cast<float*>(dx),
                                                      workspace, nacc);
  }
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  LayerNormBwdReduce<<<reduce_grid, 512, 0, s>>>(cols, parts, nacc, workspace, dw, db, dsum);
  return cudaGetLastError();
}

cudaError_t CrossEntropyFwd(int bf16, int64_t rows, int64_t vocab, const void* logits, const int32_t* t,
                            float* losses, float* lse, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (bf16)
    CrossEntropyFwdKernel<bf16_t><<<rows, 512, 0, s>>>(vocab, static_cast<const bf16_t*>(logits), t, losses, lse);
  else
    CrossEntropyFwdKernel<float><<<rows, 512, 0, s>>>(vocab, static_cast<const float*>(logits), t, losses, lse);
  return cudaGetLastError();
}

cudaError_t CrossEntropyBwd(int bf16, int64_t rows, int64_t vocab, const void* logits, const int32_t* t,
                            const float* lse, float scale, void* dlogits, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (bf16)
    CrossEntropyBwdKernel<bf16_t><<<rows, 512, 0, s>>>(vocab, static_cast<const bf16_t*>(logits), t, lse, scale,
                                                       static_cast<bf16_t*>(dlogits));
  else
    CrossEntropyBwdKernel<float><<<rows, 512, 0, s>>>(vocab, static_cast<const float*>(logits), t, lse, scale,
                                                      static_cast<float*>(dlogits));
  return cudaGetLastError();
}

cudaError_t AdamW(const AdamWDesc* descs, const AdamWChunk* chunks, int64_t num_chunks, int grad_bf16, float lr,
                  float beta1, float beta2, float eps, float wd, float bc1, float bc2_sqrt, cudaStream_t s) {
  if (num_chunks == 0) return cudaSuccess;
  if (grad_bf16)
    AdamWKernel<bf16_t><<<num_chunks, 256, 0, s>>>(descs, chunks, lr, beta1, beta2, eps, wd, bc1, bc2_sqrt);
  else
    AdamWKernel<float><<<num_chunks, 256, 0, s>>>(descs, chunks, lr, beta1, beta2, eps, wd, bc1, bc2_sqrt);
  return cudaGetLastError();
}

}  // namespace loom::cuda::launch
