// The SDPA dispatcher's fallback kernels (sdpa_math.h): one warp per row,
// lane l holding head-dim elements l, l + 32, ... (NPL per lane), f32 math
// with accurate expf/logf.
// Forward (per query row): online softmax over the keys the row sees, o and lse.
// Backward, three passes, no atomics (deterministic):
//   delta = rowsum(dO * O) per query row;
//   per query row i: p_j = exp(scale q.k_j + mask - lse), z_j = keep_j / (1 - p_drop)
//     (1 without dropout), ds_j = p_j (z_j dO.v_j - delta), dq = scale sum_j ds_j k_j;
//   per key row j (over the queries of every head of its GQA group):
//     dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij z_ij dO_i.
// Masked keys (bool false, or an additive -inf) are skipped on every pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/attention/sdpa_dropout.h"
#include "kernels/cuda/attention/sdpa_math.h"

namespace loom::kernels::cuda::attention {
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

// r[c] = row[lane + 32 c] for the elements below D, 0 beyond.
template <typename T, int NPL>
__device__ __forceinline__ void LoadRow(const T* row, int D, float* r) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int c = 0; c < NPL; ++c) {
    const int d = lane + 32 * c;
    r[c] = d < D ? Ld(row, d) : 0.f;
  }
}
template <int NPL>
__device__ __forceinline__ float Dot(const float* a, const float* b) {
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < NPL; ++c) s += a[c] * b[c];
  return WarpSum(s);
}
template <typename T, int NPL>
__device__ __forceinline__ void StoreRow(T* row, int D, const float* r, float scale) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int c = 0; c < NPL; ++c) {
    const int d = lane + 32 * c;
    if (d < D) St(row, d, scale * r[c]);
  }
}

// The query row this warp owns: (b, h, i) and its K/V head's base row.
struct QueryRow {
  int64_t row, b, h, bhk;
  int i;
};
__device__ __forceinline__ QueryRow QueryOf(const MathParams& p, int64_t row) {
  QueryRow q;
  q.row = row;
  q.i = static_cast<int>(row % p.seq_q);
  const int64_t bh = row / p.seq_q;
  q.b = bh / p.heads, q.h = bh % p.heads;
  q.bhk = q.b * p.kv_heads + q.h / (p.heads / p.kv_heads);
  return q;
}

template <typename T, int NPL>
__global__ void MathFwdKernel(MathParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(p.batch) * p.heads * p.seq_q) return;
  const QueryRow r = QueryOf(p, row);
  const int D = p.head_dim;
  const T* k = static_cast<const T*>(p.k) + r.bhk * p.seq_k * D;
  const T* v = static_cast<const T*>(p.v) + r.bhk * p.seq_k * D;
  float qr[NPL], kr[NPL], vr[NPL], acc[NPL];
  LoadRow<T, NPL>(static_cast<const T*>(p.q) + row * D, D, qr);
#pragma unroll
  for (int c = 0; c < NPL; ++c) acc[c] = 0.f;
  const int n = p.causal ? min(p.seq_k, r.i + 1) : p.seq_k;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < n; ++j) {
    float add;
    if (!MaskAt(p, r.b, r.h, r.i, j, &add)) continue;  // uniform across the warp
    LoadRow<T, NPL>(k + static_cast<int64_t>(j) * D, D, kr);
    const float s = p.scale * Dot<NPL>(qr, kr) + add;
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new), e = expf(s - m_new);
    l = l * alpha + e;
    const float ez = e * DropoutFactor(p, row, j);
    LoadRow<T, NPL>(v + static_cast<int64_t>(j) * D, D, vr);
#pragma unroll
    for (int c = 0; c < NPL; ++c) acc[c] = acc[c] * alpha + ez * vr[c];
    m = m_new;
  }
  StoreRow<T, NPL>(static_cast<T*>(p.o) + row * D, D, acc, l > 0.f ? 1.f / l : 0.f);
  if ((threadIdx.x & 31) == 0 && p.lse != nullptr) p.lse[row] = l > 0.f ? m + logf(l) : -INFINITY;
}

template <typename T, int NPL>
__global__ void MathDeltaKernel(MathParams p, float* delta) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(p.batch) * p.heads * p.seq_q) return;
  const int D = p.head_dim;
  float orow[NPL], drow[NPL];
  LoadRow<T, NPL>(static_cast<const T*>(p.o) + row * D, D, orow);
  LoadRow<T, NPL>(static_cast<const T*>(p.dout) + row * D, D, drow);
  const float s = Dot<NPL>(orow, drow);
  if ((threadIdx.x & 31) == 0) delta[row] = s;
}

template <typename T, int NPL>
__global__ void MathDqKernel(MathParams p, const float* delta) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(p.batch) * p.heads * p.seq_q) return;
  const QueryRow r = QueryOf(p, row);
  const int D = p.head_dim;
  const T* k = static_cast<const T*>(p.k) + r.bhk * p.seq_k * D;
  const T* v = static_cast<const T*>(p.v) + r.bhk * p.seq_k * D;
  float qr[NPL], dor[NPL], kr[NPL], vr[NPL], acc[NPL];
  LoadRow<T, NPL>(static_cast<const T*>(p.q) + row * D, D, qr);
  LoadRow<T, NPL>(static_cast<const T*>(p.dout) + row * D, D, dor);
#pragma unroll
  for (int c = 0; c < NPL; ++c) acc[c] = 0.f;
  const float lse = p.lse[row], dl = delta[row];
  const int n = p.causal ? min(p.seq_k, r.i + 1) : p.seq_k;
  for (int j = 0; j < n; ++j) {
    float add;
    if (!MaskAt(p, r.b, r.h, r.i, j, &add)) continue;  // uniform across the warp
    LoadRow<T, NPL>(k + static_cast<int64_t>(j) * D, D, kr);
    LoadRow<T, NPL>(v + static_cast<int64_t>(j) * D, D, vr);
    const float pj = expf(p.scale * Dot<NPL>(qr, kr) + (add - lse));
    const float ds = pj * (DropoutFactor(p, row, j) * Dot<NPL>(dor, vr) - dl);
#pragma unroll
    for (int c = 0; c < NPL; ++c) acc[c] += ds * kr[c];
  }
  StoreRow<T, NPL>(static_cast<T*>(p.dq) + row * D, D, acc, p.scale);
}

// One warp per key row (b, hk, j): the queries of every head in hk's group.
template <typename T, int NPL>
__global__ void MathDkvKernel(MathParams p, const float* delta) {
  const int64_t krow = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (krow >= static_cast<int64_t>(p.batch) * p.kv_heads * p.seq_k) return;
  const int D = p.head_dim;
  const int j = static_cast<int>(krow % p.seq_k);
  const int64_t bhk = krow / p.seq_k, hk = bhk % p.kv_heads, b = bhk / p.kv_heads;
  const int64_t group = p.heads / p.kv_heads;
  float kr[NPL], vr[NPL], qr[NPL], dor[NPL], ak[NPL], av[NPL];
  LoadRow<T, NPL>(static_cast<const T*>(p.k) + krow * D, D, kr);
  LoadRow<T, NPL>(static_cast<const T*>(p.v) + krow * D, D, vr);
#pragma unroll
  for (int c = 0; c < NPL; ++c) ak[c] = av[c] = 0.f;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const int64_t qrow0 = (b * p.heads + h) * p.seq_q;
    for (int i = p.causal ? j : 0; i < p.seq_q; ++i) {
      float add;
      if (!MaskAt(p, b, h, i, j, &add)) continue;  // uniform across the warp
      const int64_t qrow = qrow0 + i;
      LoadRow<T, NPL>(static_cast<const T*>(p.q) + qrow * D, D, qr);
      LoadRow<T, NPL>(static_cast<const T*>(p.dout) + qrow * D, D, dor);
      const float pj = expf(p.scale * Dot<NPL>(qr, kr) + (add - p.lse[qrow]));
      const float z = DropoutFactor(p, qrow, j);
      const float ds = pj * (z * Dot<NPL>(dor, vr) - delta[qrow]);
      const float pz = pj * z;
#pragma unroll
      for (int c = 0; c < NPL; ++c) {
        av[c] += pz * dor[c];
        ak[c] += ds * qr[c];
      }
    }
  }
  StoreRow<T, NPL>(static_cast<T*>(p.dk) + krow * D, D, ak, p.scale);
  StoreRow<T, NPL>(static_cast<T*>(p.dv) + krow * D, D, av, 1.f);
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
  float* delta = p.workspace;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  const int64_t krows = static_cast<int64_t>(p.batch) * p.kv_heads * p.seq_k;
  MathDeltaKernel<T, NPL><<<Blocks(rows, kWarps), 32 * kWarps, 0, s>>>(p, delta);
  MathDqKernel<T, NPL><<<Blocks(rows, kWarps), 32 * kWarps, 0, s>>>(p, delta);
  MathDkvKernel<T, NPL><<<Blocks(krows, kWarps), 32 * kWarps, 0, s>>>(p, delta);
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

}  // namespace loom::kernels::cuda::attention
