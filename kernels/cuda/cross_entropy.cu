// Softmax cross-entropy forward, backward and the fused pair (cross_entropy.h).
#include "kernels/cuda/cross_entropy.h"

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/fill.h"

namespace loom::kernels::cuda::kern {
namespace {

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
// MaxSumAdd8: one 16-byte load of 8 bf16 logits into this thread's running
// max and sum.
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

// The max and the sum of exp(x - max) of one bf16 row (8 per 16-byte load),
// reduced over the block: every thread gets both.
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

}  // namespace

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
  constexpr int64_t kMaxSmem = 200 * 1024;  // two blocks of 1024 threads per SM up to ~100 KB rows
  static const bool smem_ok = cudaFuncSetAttribute(CeFusedSmemK, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kMaxSmem)) == cudaSuccess;
  if (smem_ok && 2 * vocab <= kMaxSmem)
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

}  // namespace loom::kernels::cuda::kern
