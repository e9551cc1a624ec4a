// Flash-attention forward for sm_90 (FlashAttention-2 schedule on mma.sync).
//
// One block of NW warps takes BM = 16 NW query rows of one (batch, head); each
// warp owns 16 rows (FwdCfg: NW, the key tile BN and the blocks per SM the
// register budget is cut for; flash_variants.h lists the compiled ones).
// Q is copied once to shared memory and held in registers as A
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
#include "kernels/cuda/attention/flash_variants.h"

namespace loom::kernels::cuda::attention {


// NW warps, each owning MW groups of 16 query rows (BM = 16 MW NW), key tile
// BN, registers cut for MB blocks per SM. With MW = 1 a warp keeps its Q
// fragments in registers; with MW > 1 it reloads them from shared memory per
// tile instead (registers go to the accumulators), and each K/V fragment read
// from shared memory feeds MW products: half the shared-memory traffic at MW 2.
template <int NW_, int BN_, int MB_, int MW_ = 1>
struct FwdCfg {
  static constexpr int NW = NW_, MW = MW_, BM = 16 * MW_ * NW_, BN = BN_, MB = MB_, NT = 32 * NW_;
  static constexpr int SmemBytes(int d) { return (BM * d + 4 * BN * d) * 2; }
};

// The compiled configurations: flash_variants.h (LOOM_FWD_VARIANTS).
template <int D, class Cfg, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(Cfg::NT, Cfg::MB) FlashFwdKernel(FlashParams p) {
  using E = Elem<kBf16>;
  using T = typename E::T;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, NT = Cfg::NT, MW = Cfg::MW;
  constexpr bool kQInRegs = MW == 1;
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
  const T* q = static_cast<const T*>(p.q) + b * p.sq.b + h * p.sq.h;
  const T* k = static_cast<const T*>(p.k) + b * p.sk.b + hk * p.sk.h;
  const T* v = static_cast<const T*>(p.v) + b * p.sv.b + hk * p.sv.h;

  int n_blocks = (p.seq_k + BN - 1) / BN;
  if (kCausal) n_blocks = min(n_blocks, (m0 + BM - 1 + BN) / BN);

  LoadTile<D, BM, NT>(sQ, q, p.sq.r, m0, p.seq_q, tid);
  LoadTile<D, BN, NT>(sK, k, p.sk.r, 0, p.seq_k, tid);
  LoadTile<D, BN, NT>(sV, v, p.sv.r, 0, p.seq_k, tid);
  CpAsyncCommit();

  const float scale_log2 = p.scale * kLog2e;
  const int wrow0 = warp * MW * 16;  // this warp's first row in the tile
  // This thread's rows: m0 + wrow0 + mi * 16 + g (+ 8).
  uint32_t qf[kQInRegs ? D / 16 : 1][4];
  float o[MW][D / 8][4];
#pragma unroll
  for (int mi = 0; mi < MW; ++mi)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.f;
  float m_run[MW][2], l_run[MW][2];
#pragma unroll
  for (int mi = 0; mi < MW; ++mi) m_run[mi][0] = m_run[mi][1] = -INFINITY, l_run[mi][0] = l_run[mi][1] = 0.f;

  for (int j = 0; j < n_blocks; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_blocks) {
      LoadTile<D, BN, NT>(sK + (stage ^ 1) * BN * D, k, p.sk.r, (j + 1) * BN, p.seq_k, tid);
      LoadTile<D, BN, NT>(sV + (stage ^ 1) * BN * D, v, p.sv.r, (j + 1) * BN, p.seq_k, tid);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    if (kQInRegs && j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        Ldsm4(qf[kk], SmemAddr(sQ + Swz<D>(wrow0 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
    }
    const T* cK = sK + stage * BN * D;
    const T* cV = sV + stage * BN * D;
    // S = Q K^T for this warp's MW x 16 rows x BN keys.
    float s[MW][BN / 8][4];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi)
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[MW][4];
      if (!kQInRegs) {
#pragma unroll
        for (int mi = 0; mi < MW; ++mi)
          Ldsm4(qa[mi], SmemAddr(sQ + Swz<D>(wrow0 + mi * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
      }
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t r[4];
        Ldsm4(r, SmemAddr(cK + Swz<D>(np * 16 + (lane >> 4) * 8 + (lane & 7), kk * 16 + ((lane >> 3) & 1) * 8)));
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
          const uint32_t* a = kQInRegs ? qf[kk] : qa[mi];
          E::Mma(s[mi][2 * np], a, r[0], r[1]);
          E::Mma(s[mi][2 * np + 1], a, r[2], r[3]);
        }
      }
    }
    const int n0 = j * BN;
    const bool need_mask = (n0 + BN > p.seq_k) || (kCausal && n0 + BN - 1 > m0 + wrow0);
    if (need_mask) {
#pragma unroll
      for (int mi = 0; mi < MW; ++mi)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = n0 + nt * 8 + 2 * t + (e & 1);
            const int row = m0 + wrow0 + mi * 16 + g + (e >> 1) * 8;
            if (col >= p.seq_k || (kCausal && col > row)) s[mi][nt][e] = -INFINITY;
          }
    }
    // Online softmax (base 2), two rows per thread and row group, reduced over the quad.
#pragma unroll
    for (int mi = 0; mi < MW; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * r], s[mi][nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[mi][r], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = Exp2(m_run[mi][r] - m_use);
        m_run[mi][r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
          s[mi][nt][2 * r] = Exp2(s[mi][nt][2 * r] * scale_log2 - m_use);
          s[mi][nt][2 * r + 1] = Exp2(s[mi][nt][2 * r + 1] * scale_log2 - m_use);
          sum += s[mi][nt][2 * r] + s[mi][nt][2 * r + 1];
        }
        l_run[mi][r] = l_run[mi][r] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          o[mi][dt][2 * r] *= alpha;
          o[mi][dt][2 * r + 1] *= alpha;
        }
      }
    // O += P V.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[MW][4];
#pragma unroll
      for (int mi = 0; mi < MW; ++mi) {
        a[mi][0] = E::Pack(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        a[mi][1] = E::Pack(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        a[mi][2] = E::Pack(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        a[mi][3] = E::Pack(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t r[4];
        Ldsm4T(r, SmemAddr(cV + Swz<D>(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), dp * 16 + (lane >> 4) * 8)));
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
          E::Mma(o[mi][2 * dp], a[mi], r[0], r[1]);
          E::Mma(o[mi][2 * dp + 1], a[mi], r[2], r[3]);
        }
      }
    }
    __syncthreads();
  }

  // Epilogue: O / l and lse (none when p.lse is null: an inference forward).
  T* out = static_cast<T*>(p.o) + b * p.so.b + h * p.so.h;
#pragma unroll
  for (int mi = 0; mi < MW; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[mi][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = m0 + wrow0 + mi * 16 + g + r * 8;
      if (row < p.seq_q) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
          *reinterpret_cast<uint32_t*>(out + row * p.so.r + dt * 8 + 2 * t) =
              E::Pack(o[mi][dt][2 * r] * inv, o[mi][dt][2 * r + 1] * inv);
        if (t == 0 && p.lse != nullptr)
          p.lse[bh * p.seq_q + row] = l > 0.f ? (m_run[mi][r] + __log2f(l)) * 0.6931471805599453f : INFINITY;
      }
    }
}

}  // namespace loom::kernels::cuda::attention
