// Flash-attention forward for sm_90 (FlashAttention-2 schedule on mma.sync).
//
// One block of 8 warps takes 128 query rows of one (batch, head); each warp
// owns 16 rows. Q is copied once to shared memory and held in registers as A
// fragments; K and V tiles of 64 keys stream through two shared-memory stages
// (cp.async, the next tile in flight while the current one is used). Per tile:
// S = Q K^T (f32), the online softmax in base 2 (running max m and sum l per
// row, O rescaled by exp2(m_old - m_new)), P rounded to the input dtype and
// O += P V. Causal blocks stop at the last key tile their rows can see and mask
// only the diagonal tiles; keys past Tk are masked. The epilogue divides by l
// and writes O and lse = ln(sum exp(s * scale)) per row (f32).
// The kernels themselves (device code only): flash_fwd.cu launches them, and
// attention_emulation_test.cc runs them on the CPU through flash_common.cuh's
// warp emulation (LOOM_ATTN_EMULATE).
#pragma once

#include <cfloat>

#include "kernels/cuda/attention/flash_common.cuh"
#include "kernels/cuda/attention/flash_kernels.h"

namespace loom::cuda::attn {


constexpr int kFwdBM = 128, kFwdBN = 64, kFwdThreads = 256;

template <int D, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(kFwdThreads, 1) FlashFwdKernel(FlashParams p) {
  using E = Elem<kBf16>;
  using T = typename E::T;
  constexpr int BM = kFwdBM, BN = kFwdBN;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + BM * D;       // 2 stages
  T* sV = sK + 2 * BN * D;   // 2 stages

  const int m_block = gridDim.x - 1 - blockIdx.x;  // heavy causal blocks first
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads / p.kv_heads);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = m_block * BM;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const int64_t bhk = static_cast<int64_t>(b) * p.kv_heads + hk;
  const T* q = static_cast<const T*>(p.q) + bh * p.seq_q * D;
  const T* k = static_cast<const T*>(p.k) + bhk * p.seq_k * D;
  const T* v = static_cast<const T*>(p.v) + bhk * p.seq_k * D;

  int n_blocks = (p.seq_k + BN - 1) / BN;
  if (kCausal) n_blocks = min(n_blocks, (m0 + BM - 1 + BN) / BN);

  LoadTile<D, BM, kFwdThreads>(sQ, q, m0, p.seq_q, tid);
  LoadTile<D, BN, kFwdThreads>(sK, k, 0, p.seq_k, tid);
  LoadTile<D, BN, kFwdThreads>(sV, v, 0, p.seq_k, tid);
  CpAsyncCommit();

  const float scale_log2 = p.scale * kLog2e;
  const int row_a = m0 + warp * 16 + g;  // this thread's rows: row_a, row_a + 8
  uint32_t qf[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  for (int j = 0; j < n_blocks; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_blocks) {
      LoadTile<D, BN, kFwdThreads>(sK + (stage ^ 1) * BN * D, k, (j + 1) * BN, p.seq_k, tid);
      LoadTile<D, BN, kFwdThreads>(sV + (stage ^ 1) * BN * D, v, (j + 1) * BN, p.seq_k, tid);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        Ldsm4(qf[kk], SmemAddr(sQ + Swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
    }
    const T* cK = sK + stage * BN * D;
    const T* cV = sV + stage * BN * D;
    // S = Q K^T for this warp's 16 rows x 64 keys.
    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t r[4];
        Ldsm4(r, SmemAddr(cK + Swz<D>(np * 16 + (lane >> 4) * 8 + (lane & 7), kk * 16 + ((lane >> 3) & 1) * 8)));
        E::Mma(s[2 * np], qf[kk], r[0], r[1]);
        E::Mma(s[2 * np + 1], qf[kk], r[2], r[3]);
      }
    }
    const int n0 = j * BN;
    const bool need_mask = (n0 + BN > p.seq_k) || (kCausal && n0 + BN - 1 > m0 + warp * 16);
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n0 + nt * 8 + 2 * t + (e & 1);
          const int row = row_a + (e >> 1) * 8;
          if (col >= p.seq_k || (kCausal && col > row)) s[nt][e] = -INFINITY;
        }
    }
    // Online softmax (base 2), two rows per thread, reduced over the quad.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx * scale_log2);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = Exp2(m_run[r] - m_use);
      m_run[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        s[nt][2 * r] = Exp2(s[nt][2 * r] * scale_log2 - m_use);
        s[nt][2 * r + 1] = Exp2(s[nt][2 * r + 1] * scale_log2 - m_use);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l_run[r] = l_run[r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * r] *= alpha;
        o[dt][2 * r + 1] *= alpha;
      }
    }
    // O += P V.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4] = {E::Pack(s[2 * kk][0], s[2 * kk][1]), E::Pack(s[2 * kk][2], s[2 * kk][3]),
                       E::Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), E::Pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t r[4];
        Ldsm4T(r, SmemAddr(cV + Swz<D>(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), dp * 16 + (lane >> 4) * 8)));
        E::Mma(o[2 * dp], a, r[0], r[1]);
        E::Mma(o[2 * dp + 1], a, r[2], r[3]);
      }
    }
    __syncthreads();
  }

  // Epilogue: O / l and lse.
  T* out = static_cast<T*>(p.o) + bh * p.seq_q * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = row_a + r * 8;
    if (row < p.seq_q) {
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<uint32_t*>(out + static_cast<int64_t>(row) * D + dt * 8 + 2 * t) =
            E::Pack(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
      if (t == 0)
        p.lse[bh * p.seq_q + row] = l > 0.f ? (m_run[r] + __log2f(l)) * 0.6931471805599453f : INFINITY;
    }
  }
}

}  // namespace loom::cuda::attn
