// The SDPA dispatcher's fallback kernels (sdpa_math.h): one warp per query
// row, lane l holding head-dim elements l, l + 32, ... (NPL per lane).
// Forward: online softmax over the keys the row sees, o and lse.
// Backward: delta = rowsum(dO * O); then per query row, for each key j:
//   p = exp(scale q.k_j + mask - lse), z = keep_j / (1 - p_drop) (1 without
//   dropout), dp = dO.v_j, ds = p (z dp - delta),
//   dq += scale ds k_j (registers), dk_j += scale ds q, dv_j += p z dO (f32
//   atomics into the workspace), and a last pass rounds dK/dV to the dtype.
// Masked keys (bool false, or an additive -inf) are skipped on both passes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/attention/sdpa_dropout.h"
#include "kernels/cuda/attention/sdpa_math.h"

namespace loom::cuda::attn {
namespace {

__device__ __forceinline__ float Ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Ld(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float Ld(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void St(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void St(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void St(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

__device__ __forceinline__ float WarpSum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

constexpr int kWarps = 4;  // rows per block

// The mask's verdict for score (b, h, i, j): false = masked out; otherwise
// *add is the additive term (0 for a bool mask or none).
__device__ __forceinline__ bool MaskAt(const MathParams& p, int64_t b, int64_t h, int i, int j, float* add) {
  *add = 0.f;
  if (p.mask_kind == 0) return true;
  const int64_t off = b * p.mask_sb + h * p.mask_sh + i * p.mask_sq + j * p.mask_sk;
  switch (p.mask_kind) {
    case 1: return static_cast<const bool*>(p.mask)[off];
    case 2: *add = static_cast<const float*>(p.mask)[off]; break;
    case 3: *add = __bfloat162float(static_cast<const __nv_bfloat16*>(p.mask)[off]); break;
    default: *add = __half2float(static_cast<const __half*>(p.mask)[off]); break;
  }
  return *add != -INFINITY;
}

// Dropout's factor for score (row, j): 1 / (1 - p) if kept, 0 if dropped; 1 without dropout.
__device__ __forceinline__ float DropoutFactor(const MathParams& p, int64_t row, int j) {
  if (p.dropout_p <= 0.f) return 1.f;
  const uint64_t idx = static_cast<uint64_t>(row) * p.seq_k + j;
  return DropoutKeep(p.dropout_seed, p.dropout_offset, idx, p.dropout_p) ? 1.f / (1.f - p.dropout_p) : 0.f;
}

template <typename T, int NPL>
__global__ void MathFwdKernel(MathParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  if (row >= rows) return;
  const int D = p.head_dim;
  const int i = static_cast<int>(row % p.seq_q);
  const int64_t bh = row / p.seq_q;
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const int64_t bhk = b * p.kv_heads + h / (p.heads / p.kv_heads);
  const T* q = static_cast<const T*>(p.q) + row * D;
  const T* k = static_cast<const T*>(p.k) + bhk * p.seq_k * D;
  const T* v = static_cast<const T*>(p.v) + bhk * p.seq_k * D;
  float qr[NPL], acc[NPL];
#pragma unroll
  for (int c = 0; c < NPL; ++c) {
    const int d = lane + 32 * c;
    qr[c] = d < D ? Ld(q, d) : 0.f;
    acc[c] = 0.f;
  }
  const int n = p.causal ? min(p.seq_k, i + 1) : p.seq_k;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < n; ++j) {
    float add;
    if (!MaskAt(p, b, h, i, j, &add)) continue;  // uniform across the warp
    float dot = 0.f;
#pragma unroll
    for (int c = 0; c < NPL; ++c) {
      const int d = lane + 32 * c;
      if (d < D) dot += qr[c] * Ld(k, static_cast<int64_t>(j) * D + d);
    }
    const float s = WarpSum(dot) * p.scale + add;
    const float m_new = fmaxf(m, s);
    const float alpha = __expf(m - m_new), e = __expf(s - m_new);
    l = l * alpha + e;
    const float ez = e * DropoutFactor(p, row, j);
#pragma unroll
    for (int c = 0; c < NPL; ++c) {
      const int d = lane + 32 * c;
      acc[c] = acc[c] * alpha + (d < D ? ez * Ld(v, static_cast<int64_t>(j) * D + d) : 0.f);
    }
    m = m_new;
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  T* o = static_cast<T*>(p.o) + row * D;
#pragma unroll
  for (int c = 0; c < NPL; ++c) {
    const int d = lane + 32 * c;
    if (d < D) St(o, d, acc[c] * inv);
  }
  if (lane == 0) p.lse[row] = l > 0.f ? m + __logf(l) : -INFINITY;
}

template <typename T, int NPL>
__global__ void MathBwdKernel(MathParams p, float* dk_acc, float* dv_acc, float* delta) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  if (row >= rows) return;
  const int D = p.head_dim;
  const int i = static_cast<int>(row % p.seq_q);
  const int64_t bh = row / p.seq_q;
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const int64_t bhk = b * p.kv_heads + h / (p.heads / p.kv_heads);
  const T* q = static_cast<const T*>(p.q) + row * D;
  const T* o = static_cast<const T*>(p.o) + row * D;
  const T* dout = static_cast<const T*>(p.dout) + row * D;
  const T* k = static_cast<const T*>(p.k) + bhk * p.seq_k * D;
  const T* v = static_cast<const T*>(p.v) + bhk * p.seq_k * D;
  float* dka = dk_acc + bhk * p.seq_k * D;
  float* dva = dv_acc + bhk * p.seq_k * D;
  float qr[NPL], dor[NPL], dq[NPL];
  float dl = 0.f;
#pragma unroll
  for (int c = 0; c < NPL; ++c) {
    const int d = lane + 32 * c;
    qr[c] = d < D ? Ld(q, d) : 0.f;
    dor[c] = d < D ? Ld(dout, d) : 0.f;
    dl += d < D ? dor[c] * Ld(o, d) : 0.f;
    dq[c] = 0.f;
  }
  dl = WarpSum(dl);
  if (lane == 0) delta[row] = dl;
  const float lse = p.lse[row];
  const int n = p.causal ? min(p.seq_k, i + 1) : p.seq_k;
  for (int j = 0; j < n; ++j) {
    float add;
    if (!MaskAt(p, b, h, i, j, &add)) continue;  // uniform across the warp
    float dot = 0.f, dpd = 0.f;
#pragma unroll
    for (int c = 0; c < NPL; ++c) {
      const int d = lane + 32 * c;
      if (d < D) {
        dot += qr[c] * Ld(k, static_cast<int64_t>(j) * D + d);
        dpd += dor[c] * Ld(v, static_cast<int64_t>(j) * D + d);
      }
    }
    const float sc = WarpSum(dot) * p.scale + add, dp = WarpSum(dpd);
    const float z = DropoutFactor(p, row, j);
    const float pj = __expf(sc - lse);
    const float ds = pj * (z * dp - dl);
    const float pz = pj * z;
#pragma unroll
    for (int c = 0; c < NPL; ++c) {
      const int d = lane + 32 * c;
      if (d < D) {
        dq[c] += ds * Ld(k, static_cast<int64_t>(j) * D + d);
        atomicAdd(dka + static_cast<int64_t>(j) * D + d, p.scale * ds * qr[c]);
        atomicAdd(dva + static_cast<int64_t>(j) * D + d, pz * dor[c]);
      }
    }
  }
  T* dqo = static_cast<T*>(p.dq) + row * D;
#pragma unroll
  for (int c = 0; c < NPL; ++c) {
    const int d = lane + 32 * c;
    if (d < D) St(dqo, d, dq[c] * p.scale);
  }
}

template <typename T>
__global__ void MathCastKernel(const float* src, void* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    St(static_cast<T*>(dst), i, src[i]);
}

unsigned Blocks(int64_t n, int per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < (int64_t{1} << 30) ? b : (int64_t{1} << 30));
}

template <typename T, int NPL>
cudaError_t Fwd(const MathParams& p, cudaStream_t s) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  MathFwdKernel<T, NPL><<<Blocks(rows, kWarps), 32 * kWarps, 0, s>>>(p);
  return cudaGetLastError();
}

template <typename T, int NPL>
cudaError_t Bwd(const MathParams& p, cudaStream_t s) {
  const int64_t nk = static_cast<int64_t>(p.batch) * p.kv_heads * p.seq_k * p.head_dim;
  float* dk_acc = p.workspace;
  float* dv_acc = dk_acc + nk;
  float* delta = dv_acc + nk;
  cudaError_t e = cudaMemsetAsync(dk_acc, 0, 2 * nk * sizeof(float), s);
  if (e != cudaSuccess) return e;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  MathBwdKernel<T, NPL><<<Blocks(rows, kWarps), 32 * kWarps, 0, s>>>(p, dk_acc, dv_acc, delta);
  MathCastKernel<T><<<Blocks(nk, 256 * 8), 256, 0, s>>>(dk_acc, p.dk, nk);
  MathCastKernel<T><<<Blocks(nk, 256 * 8), 256, 0, s>>>(dv_acc, p.dv, nk);
  return cudaGetLastError();
}

template <template <typename, int> class Op, typename T>
cudaError_t ByDim(const MathParams& p, cudaStream_t s) {
  if (p.head_dim <= 32) return Op<T, 1>::Run(p, s);
  if (p.head_dim <= 64) return Op<T, 2>::Run(p, s);
  if (p.head_dim <= 128) return Op<T, 4>::Run(p, s);
  if (p.head_dim <= 256) return Op<T, 8>::Run(p, s);
  return cudaErrorInvalidValue;
}
template <template <typename, int> class Op>
cudaError_t ByType(const MathParams& p, cudaStream_t s) {
  if (p.dtype == 0) return ByDim<Op, float>(p, s);
  if (p.dtype == 1) return ByDim<Op, __nv_bfloat16>(p, s);
  if (p.dtype == 2) return ByDim<Op, __half>(p, s);
  return cudaErrorInvalidValue;
}
template <typename T, int NPL>
struct FwdOp {
  static cudaError_t Run(const MathParams& p, cudaStream_t s) { return Fwd<T, NPL>(p, s); }
};
template <typename T, int NPL>
struct BwdOp {
  static cudaError_t Run(const MathParams& p, cudaStream_t s) { return Bwd<T, NPL>(p, s); }
};

}  // namespace

cudaError_t MathForward(const MathParams& p, cudaStream_t s) { return ByType<FwdOp>(p, s); }
cudaError_t MathBackward(const MathParams& p, cudaStream_t s) { return ByType<BwdOp>(p, s); }

}  // namespace loom::cuda::attn
