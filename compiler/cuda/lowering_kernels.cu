// Kernels of the CUDA lowering (see lowering_kernels.h). Plain, readable CUDA:
// grid-stride loops, fixed-shape block reductions (deterministic), f32 math.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "compiler/cuda/lowering_kernels.h"

namespace loom::compiler::cuda::kern {
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

int Blocks(int64_t n, int64_t cap = 65536) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<int>(b);
}

int Err() { return static_cast<int>(cudaGetLastError()); }

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
// (m, s) pairs of a running max and sum of exp(x - m), combined.
__device__ __forceinline__ void MaxSumCombine(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) {
    m = mn;
    s = 0.f;
    return;
  }
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}
__device__ void BlockMaxSum(float& m, float& s) {
  __shared__ float shm[32], shs[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    MaxSumCombine(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    shm[warp] = m;
    shs[warp] = s;
  }
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  float mm = lane < nw ? shm[lane] : -INFINITY, ss = lane < nw ? shs[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, mm, o), s2 = __shfl_xor_sync(0xffffffffu, ss, o);
    MaxSumCombine(mm, ss, m2, s2);
  }
  m = mm;
  s = ss;
}
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- embedding ---------------------------------------------------------------
__global__ void EmbeddingK(int wdt, int odt, int idt, int64_t rows, int64_t cols, int64_t vocab, const void* w,
                           const void* ids, void* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t id = LdId(ids, idt, r);
    St(out, odt, i, id >= 0 && id < vocab ? Ld(w, wdt, id * cols + c) : 0.f);
  }
}
__global__ void EmbeddingBwdK(int dydt, int idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy,
                              const void* ids, float* dw) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t id = LdId(ids, idt, r);
    if (id >= 0 && id < vocab) atomicAdd(dw + id * cols + c, Ld(dy, dydt, i));
  }
}

// ---- column sums -----------------------------------------------------------------
int64_t SumParts(int64_t rows) {
  int64_t p = (rows + 63) / 64;
  return p < 1 ? 1 : p > 256 ? 256 : p;
}
__global__ void SumRowsPartK(int xdt, int64_t rows, int64_t cols, int64_t chunk, const void* x, float* ws) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float s = 0.f;
  for (int64_t r = r0; r < r1; ++r) s += Ld(x, xdt, r * cols + c);
  ws[blockIdx.y * cols + c] = s;
}
// bf16 columns, cols % 8 == 0, 16-byte aligned: a block covers 256 columns
// (32 lanes x 8 bf16 in one 16-byte load) and one chunk of rows (>= 128), its
// 8 warps taking every 8th row of the chunk; the warps' sums meet in shared
// memory in a fixed order and the block writes one partial row.
__global__ void __launch_bounds__(256) SumRowsVecPartK(int64_t rows, int64_t cols, int64_t chunk,
                                                       const bf16* __restrict__ x, float* __restrict__ ws) {
  __shared__ float sh[8][256 + 4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = blockIdx.x * 256 + 8 * lane;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float acc[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] = 0.f;
  if (c0 < cols) {
    int64_t r = r0 + warp;
    // Eight rows' loads in flight per thread before the adds.
    for (; r + 56 < r1; r += 64) {
      uint4 u[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) u[q] = *reinterpret_cast<const uint4*>(x + (r + 8 * q) * cols + c0);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u[q]);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = __bfloat1622float2(h[k]);
          acc[2 * k] += f.x;
          acc[2 * k + 1] += f.y;
        }
      }
    }
    for (; r < r1; r += 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(x + r * cols + c0);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(h[k]);
        acc[2 * k] += f.x;
        acc[2 * k + 1] += f.y;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) sh[warp][8 * lane + k] = acc[k];
  __syncthreads();
  const int64_t c = blockIdx.x * 256 + threadIdx.x;
  if (c < cols) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) t += sh[w][threadIdx.x];
    ws[blockIdx.y * cols + c] = t;
  }
}
// 32 columns per block, 16 threads down each column over every 16th part,
// then a fixed-order sum (deterministic; a serial walk per column was
// latency-bound).
__global__ void SumRowsFinalK(int odt, int64_t parts, int64_t cols, const float* ws, void* out) {
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

// ---- grad norm ---------------------------------------------------------------------
// Multi-tensor: one block per chunk of kNormChunk elements of one tensor, the
// chunk's sum of squares into partials[chunk] (16-byte loads where the tensor
// is aligned), then SqrtSumK over the chunks in a fixed order.
constexpr int64_t kNormChunk = 65536;
struct NormChunk {
  int32_t entry;
  int64_t start;
};
__global__ void __launch_bounds__(256) SumSquaresMultiK(const GradNormEntry* entries, const NormChunk* chunks,
                                                        float* partials) {
  const NormChunk ch = chunks[blockIdx.x];
  const GradNormEntry e = entries[ch.entry];
  const int64_t end = min(e.numel, ch.start + kNormChunk);
  float s = 0.f;
  // Chunk starts are multiples of kNormChunk elements: an aligned tensor has every chunk aligned.
  const bool aligned = (reinterpret_cast<uintptr_t>(e.x) & 15) == 0;
  int64_t tail = ch.start;  // where the one-element loop starts
  if (e.dt == kF32) {
    const float* x = static_cast<const float*>(e.x);
    if (aligned) {
      for (int64_t i = ch.start + 4 * int64_t(threadIdx.x); i + 3 < end; i += 4 * int64_t(blockDim.x)) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      tail = ch.start + ((end - ch.start) & ~int64_t(3));
    }
    for (int64_t k = tail + threadIdx.x; k < end; k += blockDim.x) s += x[k] * x[k];
  } else {
    const bf16* x = static_cast<const bf16*>(e.x);
    if (aligned) {
      for (int64_t i = ch.start + 8 * int64_t(threadIdx.x); i + 7 < end; i += 8 * int64_t(blockDim.x)) {
        const uint4 u = *reinterpret_cast<const uint4*>(x + i);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = __bfloat1622float2(h[k]);
          s += f.x * f.x + f.y * f.y;
        }
      }
      tail = ch.start + ((end - ch.start) & ~int64_t(7));
    }
    for (int64_t k = tail + threadIdx.x; k < end; k += blockDim.x) {
      const float v = __bfloat162float(x[k]);
      s += v * v;
    }
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void SumSquaresK(int dt, int64_t n, const void* x, float* partials) {
  float s = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = Ld(x, dt, i);
    s += v * v;
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}
__global__ void SqrtSumK(const float* partials, int64_t total, float* out) {
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) s += partials[i];
  s = BlockSum(s);
  if (threadIdx.x == 0) out[0] = sqrtf(s);
}

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

// ---- cross entropy ----------------------------------------------------------------
__device__ __forceinline__ bool Valid(int64_t t, int64_t vocab, int64_t ignore) {
  return t != ignore && t >= 0 && t < vocab;
}
__global__ void CeFwdK(int ldt, int tdt, int64_t vocab, const void* logits, const void* targets, int64_t ignore,
                       float* lse, float* row_loss) {
  const int64_t r = blockIdx.x;
  const int64_t base = r * vocab;
  // One pass over the row: online max and rescaled sum of exponentials.
  float mx = -INFINITY, s = 0.f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = Ld(logits, ldt, base + j);
    if (x > mx) {
      s = s * expf(mx - x) + 1.f;
      mx = x;
    } else {
      s += expf(x - mx);
    }
  }
  BlockMaxSum(mx, s);
  if (threadIdx.x == 0) {
    const float l = mx + logf(s);
    lse[r] = l;
    const int64_t t = LdId(targets, tdt, r);
    row_loss[r] = Valid(t, vocab, ignore) ? l - Ld(logits, ldt, base + t) : 0.f;
  }
}
// bf16 logits with vocab % 8 == 0 and 16-byte aligned rows: 16-byte loads of
// 8 logits; per load one max, at most one rescale of the running sum, and 8
// fast exponentials (ex2.approx, ~2 ulp: far inside bf16's resolution).
// The max and the sum of exp(x - max) of one bf16 row (8 per 16-byte load),
// reduced over the block: every thread gets both.
// One 16-byte load of 8 bf16 logits into this thread's running max and sum.
__device__ __forceinline__ void MaxSumAdd8(const uint4& u, float& mx, float& s) {
  const bf16* e = reinterpret_cast<const bf16*>(&u);
  float v[8], lm = -INFINITY;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    v[k] = __bfloat162float(e[k]);
    lm = fmaxf(lm, v[k]);
  }
  if (lm == -INFINITY) return;
  if (lm > mx) {
    s *= __expf(mx - lm);
    mx = lm;
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) s += __expf(v[k] - mx);
}

__device__ void RowMaxSumVec(const uint4* row, int64_t n8, float& mx, float& s) {
  mx = -INFINITY, s = 0.f;
  for (int64_t j = threadIdx.x; j < n8; j += blockDim.x) MaxSumAdd8(row[j], mx, s);
  BlockMaxSum(mx, s);
}

// dlogits of one bf16 row: scale * (exp(x - lse) - onehot(t)); zeros (no
// exp) for an ignored row (valid false).
__device__ void CeGradRowVec(const uint4* in, int64_t n8, bool valid, float scale, float lse, int64_t t,
                             uint4* out) {
  for (int64_t j = threadIdx.x; j < n8; j += blockDim.x) {
    const uint4 u = in[j];
    const bf16* e = reinterpret_cast<const bf16*>(&u);
    uint4 o;
    bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float p = valid ? __expf(__bfloat162float(e[k]) - lse) : 0.f;
      oe[k] = __float2bfloat16_rn(scale * (p - (8 * j + k == t ? 1.f : 0.f)));
    }
    out[j] = o;
  }
}

__global__ void CeFwdVecK(int tdt, int64_t vocab, const bf16* logits, const void* targets, int64_t ignore,
                          float* lse, float* row_loss) {
  const int64_t r = blockIdx.x;
  const uint4* row = reinterpret_cast<const uint4*>(logits + r * vocab);
  float mx, s;
  RowMaxSumVec(row, vocab / 8, mx, s);
  if (threadIdx.x == 0) {
    const float l = mx + logf(s);
    lse[r] = l;
    const int64_t t = LdId(targets, tdt, r);
    row_loss[r] = Valid(t, vocab, ignore) ? l - __bfloat162float(logits[r * vocab + t]) : 0.f;
  }
}

__global__ void CeLossK(int tdt, int64_t rows, int64_t vocab, const void* targets, int64_t ignore,
                        const float* row_loss, float* loss) {
  float s = 0.f, c = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    s += row_loss[r];
    c += Valid(LdId(targets, tdt, r), vocab, ignore) ? 1.f : 0.f;
  }
  s = BlockSum(s);
  c = BlockSum(c);
  if (threadIdx.x == 0) loss[0] = c > 0 ? s / c : 0.f;
}
__global__ void CountValidK(int tdt, int64_t rows, int64_t vocab, const void* targets, int64_t ignore, float* out) {
  float c = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) c += Valid(LdId(targets, tdt, r), vocab, ignore) ? 1.f : 0.f;
  c = BlockSum(c);
  if (threadIdx.x == 0) out[0] = c;
}
__global__ void CeBwdK(int ldt, int tdt, int64_t vocab, const float* dloss, const void* logits, const void* targets,
                       const float* lse, int64_t ignore, const float* count, void* dlogits) {
  const int64_t r = blockIdx.x;
  const int64_t base = r * vocab;
  const int64_t t = LdId(targets, tdt, r);
  const bool valid = Valid(t, vocab, ignore) && count[0] > 0;
  const float scale = valid ? dloss[0] / count[0] : 0.f;
  const float l = lse[r];
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float p = valid ? expf(Ld(logits, ldt, base + j) - l) : 0.f;
    St(dlogits, ldt, base + j, scale * (p - (j == t ? 1.f : 0.f)));
  }
}

__global__ void CeBwdVecK(int tdt, int64_t vocab, const float* dloss, const bf16* logits, const void* targets,
                          const float* lse, int64_t ignore, const float* count, bf16* dlogits) {
  const int64_t r = blockIdx.x;
  const int64_t t = LdId(targets, tdt, r);
  const bool valid = Valid(t, vocab, ignore) && count[0] > 0;
  const float scale = valid ? dloss[0] / count[0] : 0.f;
  const float l = lse[r];
  CeGradRowVec(reinterpret_cast<const uint4*>(logits + r * vocab), vocab / 8, valid, scale, l, t,
               reinterpret_cast<uint4*>(dlogits + r * vocab));
}

// Forward and backward in one block per row: the max/sum pass, then
// dlogits from the same row (read again, mostly from L2: 1024 threads per
// block keep about two rows per SM in flight).
__global__ void CeFusedVecK(int tdt, int64_t vocab, const float* dloss, const bf16* logits, const void* targets,
                            int64_t ignore, const float* count, float* lse, float* row_loss, bf16* dlogits) {
  const int64_t r = blockIdx.x;
  const uint4* in = reinterpret_cast<const uint4*>(logits + r * vocab);
  float mx, s;
  RowMaxSumVec(in, vocab / 8, mx, s);
  const float l = mx + logf(s);
  const int64_t t = LdId(targets, tdt, r);
  const bool valid = Valid(t, vocab, ignore);
  if (threadIdx.x == 0) {
    lse[r] = l;
    row_loss[r] = valid ? l - __bfloat162float(logits[r * vocab + t]) : 0.f;
  }
  const bool live = valid && count[0] > 0;
  CeGradRowVec(in, vocab / 8, live, live ? dloss[0] / count[0] : 0.f, l, t,
               reinterpret_cast<uint4*>(dlogits + r * vocab));
}

// The same with the row kept in shared memory between the two passes (2 *
// vocab bytes of dynamic shared memory), so each logit is read from memory
// exactly once.
__global__ void __launch_bounds__(1024) CeFusedSmemK(int tdt, int64_t vocab, const float* dloss, const bf16* logits,
                                                     const void* targets, int64_t ignore, const float* count,
                                                     float* lse, float* row_loss, bf16* dlogits) {
  extern __shared__ uint4 row_s[];
  const int64_t r = blockIdx.x;
  const int64_t n8 = vocab / 8;
  const uint4* in = reinterpret_cast<const uint4*>(logits + r * vocab);
  float mx = -INFINITY, s = 0.f;
  for (int64_t j = threadIdx.x; j < n8; j += blockDim.x) {
    const uint4 u = in[j];
    row_s[j] = u;
    MaxSumAdd8(u, mx, s);
  }
  BlockMaxSum(mx, s);  // its barriers also publish row_s
  const float l = mx + logf(s);
  const int64_t t = LdId(targets, tdt, r);
  const bool valid = Valid(t, vocab, ignore);
  if (threadIdx.x == 0) {
    lse[r] = l;
    row_loss[r] = valid ? l - __bfloat162float(logits[r * vocab + t]) : 0.f;
  }
  const bool live = valid && count[0] > 0;
  CeGradRowVec(row_s, n8, live, live ? dloss[0] / count[0] : 0.f, l, t,
               reinterpret_cast<uint4*>(dlogits + r * vocab));
}

// ---- attention (one warp per row) ------------------------------------------------
constexpr int kMaxPerLane = 8;  // head_dim <= 256

struct AttnDims {
  int64_t B, H, Hkv, Tq, Tk, D;
  bool causal;
  float scale;
  int dt;
};

__device__ __forceinline__ void LoadRow(const void* p, int dt, int64_t base, int64_t D, float* r) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    r[e] = d < D ? Ld(p, dt, base + d) : 0.f;
  }
}
__device__ __forceinline__ float Dot(const float* a, const float* b) {
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) s += a[e] * b[e];
  return WarpSum(s);
}

__global__ void AttnFwdK(AttnDims a, const void* q, const void* k, const void* v, void* o, float* lse) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;  // (b, h, i)
  if (row >= a.B * a.H * a.Tq) return;
  const int64_t i = row % a.Tq, bh = row / a.Tq, h = bh % a.H, b = bh / a.H;
  const int64_t hk = h / (a.H / a.Hkv);
  const int64_t kvbase = (b * a.Hkv + hk) * a.Tk * a.D;
  float qr[kMaxPerLane], kr[kMaxPerLane], vr[kMaxPerLane], acc[kMaxPerLane];
  LoadRow(q, a.dt, row * a.D, a.D, qr);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) acc[e] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t jend = a.causal ? min(a.Tk, i + 1) : a.Tk;
  for (int64_t j = 0; j < jend; ++j) {
    LoadRow(k, a.dt, kvbase + j * a.D, a.D, kr);
    const float s = a.scale * Dot(qr, kr);
    const float mn = fmaxf(m, s);
    const float corr = expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
    LoadRow(v, a.dt, kvbase + j * a.D, a.D, vr);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) acc[e] = acc[e] * corr + p * vr[e];
    m = mn;
  }
  const int lane = threadIdx.x & 31;
  const float inv = l > 0 ? 1.f / l : 0.f;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < a.D) St(o, a.dt, row * a.D + d, acc[e] * inv);
  }
  if (lane == 0) lse[row] = l > 0 ? m + logf(l) : -INFINITY;
}

__global__ void AttnDeltaK(AttnDims a, const void* o, const void* dout, float* delta) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (row >= a.B * a.H * a.Tq) return;
  float orow[kMaxPerLane], drow[kMaxPerLane];
  LoadRow(o, a.dt, row * a.D, a.D, orow);
  LoadRow(dout, a.dt, row * a.D, a.D, drow);
  const float s = Dot(orow, drow);
  if ((threadIdx.x & 31) == 0) delta[row] = s;
}

__global__ void AttnDqK(AttnDims a, const void* q, const void* k, const void* v, const void* dout, const float* lse,
                        const float* delta, void* dq) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (row >= a.B * a.H * a.Tq) return;
  const int64_t i = row % a.Tq, bh = row / a.Tq, h = bh % a.H, b = bh / a.H;
  const int64_t hk = h / (a.H / a.Hkv);
  const int64_t kvbase = (b * a.Hkv + hk) * a.Tk * a.D;
  float qr[kMaxPerLane], dor[kMaxPerLane], kr[kMaxPerLane], vr[kMaxPerLane], acc[kMaxPerLane];
  LoadRow(q, a.dt, row * a.D, a.D, qr);
  LoadRow(dout, a.dt, row * a.D, a.D, dor);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) acc[e] = 0.f;
  const float L = lse[row], dl = delta[row];
  const int64_t jend = a.causal ? min(a.Tk, i + 1) : a.Tk;
  for (int64_t j = 0; j < jend; ++j) {
    LoadRow(k, a.dt, kvbase + j * a.D, a.D, kr);
    LoadRow(v, a.dt, kvbase + j * a.D, a.D, vr);
    const float p = expf(a.scale * Dot(qr, kr) - L);
    const float ds = p * (Dot(dor, vr) - dl);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) acc[e] += ds * kr[e];
  }
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < a.D) St(dq, a.dt, row * a.D + d, a.scale * acc[e]);
  }
}

__global__ void AttnDkvK(AttnDims a, const void* q, const void* k, const void* v, const void* dout, const float* lse,
                         const float* delta, void* dk, void* dv) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;  // (b, hk, j)
  if (row >= a.B * a.Hkv * a.Tk) return;
  const int64_t j = row % a.Tk, bh = row / a.Tk, hk = bh % a.Hkv, b = bh / a.Hkv;
  const int64_t group = a.H / a.Hkv;
  float kr[kMaxPerLane], vr[kMaxPerLane], qr[kMaxPerLane], dor[kMaxPerLane], ak[kMaxPerLane], av[kMaxPerLane];
  LoadRow(k, a.dt, row * a.D, a.D, kr);
  LoadRow(v, a.dt, row * a.D, a.D, vr);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) ak[e] = av[e] = 0.f;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const int64_t qrow0 = (b * a.H + h) * a.Tq;
    for (int64_t i = a.causal ? j : 0; i < a.Tq; ++i) {
      const int64_t qrow = qrow0 + i;
      LoadRow(q, a.dt, qrow * a.D, a.D, qr);
      LoadRow(dout, a.dt, qrow * a.D, a.D, dor);
      const float p = expf(a.scale * Dot(qr, kr) - lse[qrow]);
      const float ds = p * (Dot(dor, vr) - delta[qrow]);
#pragma unroll
      for (int e = 0; e < kMaxPerLane; ++e) {
        av[e] += p * dor[e];
        ak[e] += ds * qr[e];
      }
    }
  }
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < a.D) {
      St(dk, a.dt, row * a.D + d, a.scale * ak[e]);
      St(dv, a.dt, row * a.D + d, av[e]);
    }
  }
}

AttnDims Dims(const AttnArgs& a) {
  AttnDims d;
  d.B = a.batch;
  d.H = a.heads;
  d.Hkv = a.kv_heads > 0 ? a.kv_heads : a.heads;
  d.Tq = a.seq_q;
  d.Tk = a.seq_k;
  d.D = a.head_dim;
  d.causal = a.causal;
  d.scale = a.scale > 0 ? a.scale : 1.f / sqrtf(static_cast<float>(a.head_dim));
  d.dt = a.dtype;
  return d;
}
int WarpBlocks(int64_t rows) { return static_cast<int>((rows * 32 + kThreads - 1) / kThreads); }

// ---- RMSNorm, RoPE ---------------------------------------------------------------
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
                          void* dx) {
  const int64_t base = blockIdx.x * cols;
  const float rs = rstd[blockIdx.x];
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += Ld(dy, dt, base + j) * w[j] * Ld(x, dt, base + j) * rs;
  const float mgx = BlockSum(s) / static_cast<float>(cols);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    St(dx, dt, base + j, rs * (Ld(dy, dt, base + j) * w[j] - Ld(x, dt, base + j) * rs * mgx));
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

// ---- AdamW ------------------------------------------------------------------------
constexpr int64_t kAdamChunk = 65536;
struct AdamChunk {
  int32_t entry;
  int64_t start;
};

__global__ void AdamWK(const AdamWEntry* entries, const AdamChunk* chunks, AdamWConsts c) {
  const AdamChunk ch = chunks[blockIdx.x];
  const AdamWEntry e = entries[ch.entry];
  const double lr = c.lr[0];
  double step;
  if (c.step_dtype == 1) step = static_cast<const int32_t*>(c.step)[0];
  else if (c.step_dtype == 2) step = static_cast<double>(static_cast<const int64_t*>(c.step)[0]);
  else step = static_cast<const float*>(c.step)[0];
  const double gn = c.grad_norm ? c.grad_norm[0] : 0.0;
  const double clipd = c.max_norm > 0 ? fmin(1.0, c.max_norm / (gn + 1e-6)) : 1.0;
  const double bc1 = 1 - pow(c.beta1, step), bc2 = 1 - pow(c.beta2, step);
  const float clip = static_cast<float>(clipd), b1 = static_cast<float>(c.beta1), b2 = static_cast<float>(c.beta2);
  const float omb1 = static_cast<float>(1 - c.beta1), omb2 = static_cast<float>(1 - c.beta2);
  const float decay = static_cast<float>(1 - lr * e.weight_decay);
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1 / sqrt(bc2));
  const float eps = static_cast<float>(c.eps);
  const int64_t end = min(e.numel, ch.start + kAdamChunk);
  for (int64_t i = ch.start + threadIdx.x; i < end; i += blockDim.x) {
    const float g = (e.grad_bf16 ? __bfloat162float(static_cast<const bf16*>(e.grad)[i])
                                 : static_cast<const float*>(e.grad)[i]) * clip;
    const float mi = b1 * e.m[i] + omb1 * g;
    const float vi = b2 * e.v[i] + omb2 * g * g;
    const float denom = sqrtf(vi) * inv_sqrt_bc2 + eps;
    const float p = e.param[i] * decay - step_size * mi / denom;
    e.param[i] = p;
    e.m[i] = mi;
    e.v[i] = vi;
    if (e.param_bf16) static_cast<bf16*>(e.param_bf16)[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace

int Embedding(Dt wdt, Dt odt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* w, const void* ids,
              void* out, Stream s) {
  EmbeddingK<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(s)>>>(wdt, odt, idt, rows, cols, vocab,
                                                                                 w, ids, out);
  return Err();
}

int EmbeddingBackward(Dt dydt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy, const void* ids,
                      float* dw, Stream s) {
  cudaError_t e = cudaMemsetAsync(dw, 0, sizeof(float) * vocab * cols, static_cast<cudaStream_t>(s));
  if (e != cudaSuccess) return static_cast<int>(e);
  EmbeddingBwdK<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(s)>>>(dydt, idt, rows, cols, vocab,
                                                                                    dy, ids, dw);
  return Err();
}

int64_t SumRowsWorkspaceFloats(int64_t rows, int64_t cols) { return SumParts(rows) * cols; }

int SumRows(Dt xdt, Dt odt, int64_t rows, int64_t cols, const void* x, void* out, float* ws, Stream s) {
  if (xdt == kBF16 && cols % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 && rows > 0) {
    static const bool vec_on = [] {  // LOOM_CUDA_SUMROWS_VEC=0: the scalar kernel (A/B timing)
      const char* v = std::getenv("LOOM_CUDA_SUMROWS_VEC");
      return !(v && v[0] == '0');
    }();
    // Chunks of >= 128 rows, parts <= SumParts(rows): within SumRowsWorkspaceFloats.
    const int64_t sp = SumParts(rows);
    const int64_t chunk = std::max<int64_t>(128, (rows + sp - 1) / sp), parts = (rows + chunk - 1) / chunk;
    if (vec_on) {
      dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(parts));
      SumRowsVecPartK<<<grid, 256, 0, static_cast<cudaStream_t>(s)>>>(rows, cols, chunk, static_cast<const bf16*>(x),
                                                                        ws);
      SumRowsFinalK<<<static_cast<unsigned>((cols + 31) / 32), 512, 0, static_cast<cudaStream_t>(s)>>>(odt, parts, cols,
                                                                                                     ws, out);
      return Err();
    }
  }
  const int64_t parts = SumParts(rows), chunk = (rows + parts - 1) / parts;
  dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(parts));
  SumRowsPartK<<<grid, kThreads, 0, static_cast<cudaStream_t>(s)>>>(xdt, rows, cols, chunk, x, ws);
  SumRowsFinalK<<<static_cast<unsigned>((cols + 31) / 32), 512, 0, static_cast<cudaStream_t>(s)>>>(odt, parts, cols, ws, out);
  return Err();
}

int GradNormPartials(int64_t n) { return Blocks(n / 16 + 1, 256); }

int64_t GradNormChunks(int64_t n) { return (n + kNormChunk - 1) / kNormChunk; }

int GradNormUpload(const GradNormEntry* host_entries, int n, void** dev_entries, void** dev_chunks,
                   int64_t* num_chunks) {
  std::vector<NormChunk> chunks;
  for (int t = 0; t < n; ++t)
    for (int64_t st = 0; st < host_entries[t].numel; st += kNormChunk) chunks.push_back({t, st});
  *num_chunks = static_cast<int64_t>(chunks.size());
  cudaError_t e = cudaMalloc(dev_entries, sizeof(GradNormEntry) * (n > 0 ? n : 1));
  if (e == cudaSuccess) e = cudaMalloc(dev_chunks, sizeof(NormChunk) * (chunks.empty() ? 1 : chunks.size()));
  if (e == cudaSuccess && n > 0)
    e = cudaMemcpy(*dev_entries, host_entries, sizeof(GradNormEntry) * n, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && !chunks.empty())
    e = cudaMemcpy(*dev_chunks, chunks.data(), sizeof(NormChunk) * chunks.size(), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();  // pageable copies may still be in flight
  return static_cast<int>(e);
}

int GradNormMulti(const void* dev_entries, const void* dev_chunks, int64_t num_chunks, float* partials, float* out,
                  Stream s) {
  cudaStream_t st = static_cast<cudaStream_t>(s);
  if (num_chunks > 0)
    SumSquaresMultiK<<<static_cast<unsigned>(num_chunks), kThreads, 0, st>>>(
        static_cast<const GradNormEntry*>(dev_entries), static_cast<const NormChunk*>(dev_chunks), partials);
  SqrtSumK<<<1, 1024, 0, st>>>(partials, num_chunks, out);
  return Err();
}

int SumSquaresPartial(Dt dt, int64_t n, const void* x, float* partials, Stream s) {
  SumSquaresK<<<GradNormPartials(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(dt, n, x, partials);
  return Err();
}

int SqrtSum(const float* partials, int64_t total, float* out, Stream s) {
  SqrtSumK<<<1, 1024, 0, static_cast<cudaStream_t>(s)>>>(partials, total, out);
  return Err();
}

int Fill(Dt dt, int64_t n, double value, void* out, Stream s) {
  FillK<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(dt, n, static_cast<float>(value), out);
  return Err();
}

int RmsNormForward(Dt dt, int64_t rows, int64_t cols, const void* x, const float* w, double eps, void* y,
                   float* rstd, Stream s) {
  if (rows <= 0) return 0;
  RmsFwdK<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(s)>>>(
      dt, cols, x, w, static_cast<float>(eps), y, rstd);
  return Err();
}

int RmsNormBackward(Dt dt, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                    const float* rstd, void* dx, float* dw, float* ws, Stream s) {
  if (rows <= 0) return Fill(kF32, cols, 0.0, dw, s);
  cudaStream_t st = static_cast<cudaStream_t>(s);
  RmsBwdDxK<<<static_cast<unsigned>(rows), kThreads, 0, st>>>(dt, cols, dy, x, w, rstd, dx);
  const int64_t parts = SumParts(rows), chunk = (rows + parts - 1) / parts;
  dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(parts));
  RmsBwdDwPartK<<<grid, kThreads, 0, st>>>(dt, rows, cols, chunk, dy, x, rstd, ws);
  SumRowsFinalK<<<static_cast<unsigned>((cols + 31) / 32), 512, 0, st>>>(kF32, parts, cols, ws, dw);
  return Err();
}

int Rope(Dt dt, int64_t B, int64_t T, int64_t H, int64_t D, double theta, int64_t offset, bool inverse,
         const void* x, void* y, Stream s) {
  const int64_t pairs = B * T * H * (D / 2);
  if (pairs <= 0) return 0;
  RopeK<<<Blocks(pairs), kThreads, 0, static_cast<cudaStream_t>(s)>>>(dt, T, H, D, theta, offset, inverse, x, y,
                                                                      pairs);
  return Err();
}

int CastF32ToBF16(int64_t n, const float* x, void* out, Stream s) {
  CastK<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(n, x, static_cast<bf16*>(out));
  return Err();
}

int CrossEntropyForward(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const void* logits, const void* targets,
                        int64_t ignore_index, float* lse, float* row_loss, float* loss, Stream s) {
  if (rows <= 0) return Fill(kF32, 1, 0.0, loss, s);
  if (ldt == kBF16 && vocab % 8 == 0 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0)
    CeFwdVecK<<<static_cast<unsigned>(rows), 512, 0, static_cast<cudaStream_t>(s)>>>(
        tdt, vocab, static_cast<const bf16*>(logits), targets, ignore_index, lse, row_loss);
  else
    CeFwdK<<<static_cast<unsigned>(rows), 512, 0, static_cast<cudaStream_t>(s)>>>(ldt, tdt, vocab, logits, targets,
                                                                                  ignore_index, lse, row_loss);
  CeLossK<<<1, 1024, 0, static_cast<cudaStream_t>(s)>>>(tdt, rows, vocab, targets, ignore_index, row_loss, loss);
  return Err();
}

int CrossEntropyFused(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const float* dloss, const void* logits,
                      const void* targets, int64_t ignore_index, float* lse, float* loss, void* dlogits, float* ws,
                      Stream s) {
  if (rows <= 0) return Fill(kF32, 1, 0.0, loss, s);
  float* row_loss = ws;
  float* count = ws + rows;
  const bool vec = ldt == kBF16 && vocab % 8 == 0 &&
                   ((reinterpret_cast<uintptr_t>(logits) | reinterpret_cast<uintptr_t>(dlogits)) & 15) == 0;
  if (!vec) {  // the two passes as separate kernels (same results)
    if (int e = CrossEntropyForward(ldt, tdt, rows, vocab, logits, targets, ignore_index, lse, row_loss, loss, s))
      return e;
    return CrossEntropyBackward(ldt, tdt, rows, vocab, dloss, logits, targets, lse, ignore_index, dlogits, count, s);
  }
  cudaStream_t st = static_cast<cudaStream_t>(s);
  CountValidK<<<1, 1024, 0, st>>>(tdt, rows, vocab, targets, ignore_index, count);
  const bf16* lg = static_cast<const bf16*>(logits);
  bf16* dl = static_cast<bf16*>(dlogits);
  static const bool reread = [] {  // LOOM_CUDA_CE_FUSED_REREAD=1: the re-reading kernel (A/B timing)
    const char* e = std::getenv("LOOM_CUDA_CE_FUSED_REREAD");
    return e != nullptr && e[0] == '1';
  }();
  constexpr int64_t kMaxSmem = 200 * 1024;  // two blocks of 1024 threads per SM up to ~100 KB rows
  static const bool smem_ok = cudaFuncSetAttribute(CeFusedSmemK, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kMaxSmem)) == cudaSuccess;
  if (!reread && smem_ok && 2 * vocab <= kMaxSmem)
    CeFusedSmemK<<<static_cast<unsigned>(rows), 1024, static_cast<size_t>(2 * vocab), st>>>(
        tdt, vocab, dloss, lg, targets, ignore_index, count, lse, row_loss, dl);
  else
    CeFusedVecK<<<static_cast<unsigned>(rows), 1024, 0, st>>>(tdt, vocab, dloss, lg, targets, ignore_index, count,
                                                                lse, row_loss, dl);
  CeLossK<<<1, 1024, 0, st>>>(tdt, rows, vocab, targets, ignore_index, row_loss, loss);
  return Err();
}

int CrossEntropyBackward(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const float* dloss, const void* logits,
                         const void* targets, const float* lse, int64_t ignore_index, void* dlogits, float* ws,
                         Stream s) {
  if (rows <= 0) return 0;
  CountValidK<<<1, 1024, 0, static_cast<cudaStream_t>(s)>>>(tdt, rows, vocab, targets, ignore_index, ws);
  if (ldt == kBF16 && vocab % 8 == 0 && ((reinterpret_cast<uintptr_t>(logits) | reinterpret_cast<uintptr_t>(dlogits)) & 15) == 0)
    CeBwdVecK<<<static_cast<unsigned>(rows), 512, 0, static_cast<cudaStream_t>(s)>>>(
        tdt, vocab, dloss, static_cast<const bf16*>(logits), targets, lse, ignore_index, ws, static_cast<bf16*>(dlogits));
  else
    CeBwdK<<<static_cast<unsigned>(rows), 512, 0, static_cast<cudaStream_t>(s)>>>(ldt, tdt, vocab, dloss, logits,
                                                                                  targets, lse, ignore_index, ws,
                                                                                  dlogits);
  return Err();
}

int AttentionForward(const AttnArgs& a, Stream s) {
  if (a.head_dim > 32 * kMaxPerLane) return static_cast<int>(cudaErrorInvalidValue);
  const AttnDims d = Dims(a);
  AttnFwdK<<<WarpBlocks(d.B * d.H * d.Tq), kThreads, 0, static_cast<cudaStream_t>(s)>>>(d, a.q, a.k, a.v, a.o,
                                                                                         a.lse);
  return Err();
}

int AttentionBackward(const AttnArgs& a, Stream s) {
  if (a.head_dim > 32 * kMaxPerLane) return static_cast<int>(cudaErrorInvalidValue);
  const AttnDims d = Dims(a);
  cudaStream_t st = static_cast<cudaStream_t>(s);
  AttnDeltaK<<<WarpBlocks(d.B * d.H * d.Tq), kThreads, 0, st>>>(d, a.o, a.dout, a.workspace);
  AttnDqK<<<WarpBlocks(d.B * d.H * d.Tq), kThreads, 0, st>>>(d, a.q, a.k, a.v, a.dout, a.lse, a.workspace, a.dq);
  AttnDkvK<<<WarpBlocks(d.B * d.Hkv * d.Tk), kThreads, 0, st>>>(d, a.q, a.k, a.v, a.dout, a.lse, a.workspace, a.dk,
                                                                 a.dv);
  return Err();
}

int AdamWUpload(const AdamWEntry* host_entries, int n, void** dev_entries, void** dev_chunks, int64_t* num_chunks) {
  std::vector<AdamChunk> chunks;
  for (int t = 0; t < n; ++t)
    for (int64_t st = 0; st < host_entries[t].numel; st += kAdamChunk) chunks.push_back({t, st});
  *num_chunks = static_cast<int64_t>(chunks.size());
  cudaError_t e = cudaMalloc(dev_entries, sizeof(AdamWEntry) * (n > 0 ? n : 1));
  if (e == cudaSuccess) e = cudaMalloc(dev_chunks, sizeof(AdamChunk) * (chunks.empty() ? 1 : chunks.size()));
  if (e == cudaSuccess && n > 0) e = cudaMemcpy(*dev_entries, host_entries, sizeof(AdamWEntry) * n, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && !chunks.empty())
    e = cudaMemcpy(*dev_chunks, chunks.data(), sizeof(AdamChunk) * chunks.size(), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();  // pageable copies may still be in flight
  return static_cast<int>(e);
}

int AdamWStep(const void* dev_entries, const void* dev_chunks, int64_t num_chunks, const AdamWConsts& c, Stream s) {
  if (num_chunks == 0) return 0;
  AdamWK<<<static_cast<unsigned>(num_chunks), kThreads, 0, static_cast<cudaStream_t>(s)>>>(
      static_cast<const AdamWEntry*>(dev_entries), static_cast<const AdamChunk*>(dev_chunks), c);
  return Err();
}

}  // namespace loom::compiler::cuda::kern
