// Flash-attention forward on Hopper's warpgroup products (sm_90a wgmma):
// forward variants kFwdWgmmaVariant, kFwdWgmmaPipeVariant and
// kFwdWgmmaPipe1Variant (the two schedules of FlashFwdWgmmaKernel below, the
// pipelined one with two warpgroups or one; the pipelined ones are the
// defaults). Same contract and outputs as
// flash_fwd_kernel.cuh (O and lse, causal top-left, GQA, strided operands,
// ragged ends), different engine:
//   - a block is NWG warpgroups (128 threads each) of 64 query rows, two
//     (BM = 128) or one (BM = 64: smaller blocks, more of them per SM); key
//     tiles of BN = 128 keys;
//   - Q, K and V sit in shared memory in wgmma's 128-byte-swizzled layout
//     (wgmma.cuh), copied in with cp.async; K/V double-buffered, the next
//     tile in flight while the current one is used;
//   - S = Q K^T is one m64n128 product chain per warpgroup read straight
//     from shared memory (no ldmatrix), the online softmax runs on the
//     accumulators (mma.sync's layout, so the code is the mma.sync kernel's),
//     and O += P V takes P from registers and V from shared memory through
//     the transpose bit.
// The two warpgroups of a block run their products and softmaxes
// independently, so one's exponentials overlap the other's tensor-core work.
// flash_wgmma.cu launches it (sm_90a code); attention_emulation_test runs it
// on the CPU through warp_emulator.h's warpgroup products.
#pragma once

#include "kernels/cuda/attention/flash_common.cuh"
#include "kernels/cuda/attention/flash_kernels.h"
#include "kernels/cuda/attention/wgmma.cuh"

namespace loom::kernels::cuda::attention {

constexpr int kWgFwdBN = 128;  // keys per tile

template <int D, int BM>
constexpr int WgmmaSmemBytes() {
  return (BM * D + 4 * kWgFwdBN * D) * 2 + 1024;  // + alignment slack
}

// Per-warpgroup pieces shared by the two schedules. A thread holds rows g and
// g + 8 of its warp's 16 (r = 0, 1) and columns 8i + 2t, +1 of each group i.
template <int D, int BM, bool kBf16>
struct WgTile {
  using E = Elem<kBf16>;
  // S = Q K^T for 64 rows x kWgFwdBN keys, issued (not waited): D / 16 steps, step
  // kk in 64-column panel kk / 4, 32 bytes per step within it.
  static __device__ __forceinline__ void IssueS(float* s, uint32_t q_addr, uint32_t k_addr) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wg::Mma<kWgFwdBN, kBf16>::SS(s, wg::Desc(q_addr + (kk / 4) * BM * 128 + (kk % 4) * 32, 16, 1024),
                              wg::Desc(k_addr + (kk / 4) * kWgFwdBN * 128 + (kk % 4) * 32, 16, 1024), kk > 0);
  }
  // O += P V, issued: V's tile [key][d] is MN-major for this product
  // (transpose bit): 16 keys = two 8-row groups 1024 B apart, D in 64-column
  // panels kWgFwdBN * 128 B apart.
  static __device__ __forceinline__ void IssuePV(float* o, const uint32_t (*a)[4], uint32_t v_addr) {
#pragma unroll
    for (int kk = 0; kk < kWgFwdBN / 16; ++kk)
      wg::Mma<D, kBf16>::template RS<1>(o, a[kk], wg::Desc(v_addr + kk * 16 * 128, kWgFwdBN * 128, 1024), 1);
  }
  // -inf past seq_k and (causal) above the diagonal; row0 = the warp's first row.
  template <bool kCausal>
  static __device__ __forceinline__ void Mask(float* s, int n0, int row0, int seq_k, int g, int t) {
    if (!((n0 + kWgFwdBN > seq_k) || (kCausal && n0 + kWgFwdBN - 1 > row0))) return;
#pragma unroll
    for (int i = 0; i < kWgFwdBN / 2; ++i) {
      const int col = n0 + (i >> 2) * 8 + 2 * t + (i & 1);
      const int row = row0 + g + ((i >> 1) & 1) * 8;
      if (col >= seq_k || (kCausal && col > row)) s[i] = -INFINITY;
    }
  }
  // Online softmax (base 2) over the tile: s becomes P (unnormalised), m and l
  // are updated, alpha = the factor O must be scaled by.
  static __device__ __forceinline__ void Softmax(float* s, float* m_run, float* l_run, float* alpha,
                                                 float scale_log2) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kWgFwdBN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[4 * nt + 2 * r], s[4 * nt + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx * scale_log2);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = Exp2(m_run[r] - m_use);
      m_run[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kWgFwdBN / 8; ++nt) {
        s[4 * nt + 2 * r] = Exp2(s[4 * nt + 2 * r] * scale_log2 - m_use);
        s[4 * nt + 2 * r + 1] = Exp2(s[4 * nt + 2 * r + 1] * scale_log2 - m_use);
        sum += s[4 * nt + 2 * r] + s[4 * nt + 2 * r + 1];
      }
      l_run[r] = l_run[r] * alpha[r] + sum;
    }
  }
  static __device__ __forceinline__ void Rescale(float* o, const float* alpha) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[4 * dt] *= alpha[0], o[4 * dt + 1] *= alpha[0];
      o[4 * dt + 2] *= alpha[1], o[4 * dt + 3] *= alpha[1];
    }
  }
  // O / l and lse for rows row0 + g (+ 8); no lse when it is null (an inference
  // forward).
  static __device__ __forceinline__ void Store(const float* o, const float* m_run, const float* l_run,
                                               typename E::T* out, int64_t ld, float* lse, int row0, int seq_q,
                                               int g, int t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = row0 + g + r * 8;
      if (row < seq_q) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
          *reinterpret_cast<uint32_t*>(out + row * ld + dt * 8 + 2 * t) =
              E::Pack(o[4 * dt + 2 * r] * inv, o[4 * dt + 2 * r + 1] * inv);
        if (t == 0 && lse != nullptr) lse[row] = l > 0.f ? (m_run[r] + __log2f(l)) * 0.6931471805599453f : INFINITY;
      }
    }
  }
};

// kPipe = false: per key tile, S, softmax, P V in turn (each warpgroup waits
// for its own products). kPipe = true: the next tile's S = Q K^T is issued
// with this tile's P V, and its softmax runs while P V is still on the tensor
// cores (O is rescaled once P V is done); K runs one tile ahead of V in the
// double buffers so that both are in flight a whole iteration ahead.
// Blocks per multiprocessor the register budget is set for. At D 64 one
// warpgroup needs 172-174 registers unbounded, which fits two blocks per SM;
// bounded for three, ptxas gives it 166-168 with no spills, and three blocks'
// 73 KB of shared memory fit. The forward then takes 0.073 ms, not 0.081
// (H200, B8 H12 T1024 non-causal; causal 0.053, not 0.057: docs/perf.md).
template <int D, int NWG>
constexpr int kFwdMinBlocks = (D == 64 && NWG == 1) ? 3 : 1;

template <int D, int NWG, bool kBf16, bool kCausal, bool kPipe>
__global__ void __launch_bounds__(128 * NWG, kFwdMinBlocks<D, NWG>) FlashFwdWgmmaKernel(FlashParams p) {
  constexpr int kBM = 64 * NWG, kNT = 128 * NWG;
  using W = WgTile<D, kBM, kBf16>;
  using T = typename Elem<kBf16>::T;
  extern __shared__ unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  T* sK = sQ + kBM * D;       // 2 stages
  T* sV = sK + 2 * kWgFwdBN * D;  // 2 stages

  const int m_block = gridDim.x - 1 - blockIdx.x;  // heavy causal blocks first
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads / p.kv_heads);
  const int tid = threadIdx.x, wgi = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = m_block * kBM;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const T* q = static_cast<const T*>(p.q) + b * p.sq.b + h * p.sq.h;
  const T* k = static_cast<const T*>(p.k) + b * p.sk.b + hk * p.sk.h;
  const T* v = static_cast<const T*>(p.v) + b * p.sv.b + hk * p.sv.h;

  int n_blocks = (p.seq_k + kWgFwdBN - 1) / kWgFwdBN;
  if (kCausal) n_blocks = min(n_blocks, (m0 + kBM - 1 + kWgFwdBN) / kWgFwdBN);
  auto load_k = [&](int j) {
    wg::LoadSw<D, kWgFwdBN, kNT>(sK + (j & 1) * kWgFwdBN * D, k, p.sk.r, j * kWgFwdBN, p.seq_k, tid);
  };
  auto load_v = [&](int j) {
    wg::LoadSw<D, kWgFwdBN, kNT>(sV + (j & 1) * kWgFwdBN * D, v, p.sv.r, j * kWgFwdBN, p.seq_k, tid);
  };
  auto k_addr = [&](int j) { return SmemAddr(sK + (j & 1) * kWgFwdBN * D); };
  auto v_addr = [&](int j) { return SmemAddr(sV + (j & 1) * kWgFwdBN * D); };

  const float scale_log2 = p.scale * kLog2e;
  const int row0 = m0 + wgi * 64 + warp * 16;  // this warp's first row
  const uint32_t q_addr = SmemAddr(sQ) + wgi * 64 * 128;
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f}, alpha[2];
  float s[kWgFwdBN / 2];
  uint32_t a[kWgFwdBN / 16][4];

  wg::LoadSw<D, kBM, kNT>(sQ, q, p.sq.r, m0, p.seq_q, tid);
  load_k(0);
  if (!kPipe) load_v(0);
  CpAsyncCommit();
  if (kPipe) {
    // Prologue: tile 0's S and softmax; K1 and V0 in flight meanwhile.
    if (n_blocks > 1) load_k(1);
    load_v(0);
    CpAsyncCommit();
    CpAsyncWait<1>();
    wg::FenceProxyAsync();
    __syncthreads();
    wg::Fence();
    W::IssueS(s, q_addr, k_addr(0));
    wg::Commit();
    wg::Wait<0>();
    wg::FenceRegs<kWgFwdBN / 2>(s);
    W::template Mask<kCausal>(s, 0, row0, p.seq_k, g, t);
    W::Softmax(s, m_run, l_run, alpha, scale_log2);
    wg::PackA<kWgFwdBN, kBf16>(s, a);
  }

  for (int j = 0; j < n_blocks; ++j) {
    if (!kPipe) {
      if (j + 1 < n_blocks) load_k(j + 1), load_v(j + 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
      wg::FenceProxyAsync();
      __syncthreads();
      wg::Fence();
      W::IssueS(s, q_addr, k_addr(j));
      wg::Commit();
      wg::Wait<0>();
      wg::FenceRegs<kWgFwdBN / 2>(s);
      W::template Mask<kCausal>(s, j * kWgFwdBN, row0, p.seq_k, g, t);
      W::Softmax(s, m_run, l_run, alpha, scale_log2);
      W::Rescale(o, alpha);
      wg::PackA<kWgFwdBN, kBf16>(s, a);
      wg::FenceRegs<D / 2>(o);
      wg::Fence();
      W::IssuePV(o, a, v_addr(j));
      wg::Commit();
      wg::Wait<0>();
      wg::FenceRegs<D / 2>(o);
      __syncthreads();
      continue;
    }
    // Everyone is done with tile j's K (S_j) and tile j-1's V: refill them
    // with K_{j+2} and V_{j+1}; then wait for K_{j+1} and V_j (one group back).
    __syncthreads();
    if (j + 2 < n_blocks) load_k(j + 2);
    if (j + 1 < n_blocks) load_v(j + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    wg::FenceProxyAsync();
    __syncthreads();
    if (j + 1 == n_blocks) break;  // the last tile's P V follows the loop
    wg::Fence();
    W::IssueS(s, q_addr, k_addr(j + 1));
    wg::Commit();
    wg::Fence();
    W::IssuePV(o, a, v_addr(j));
    wg::Commit();
    wg::Wait<1>();  // S_{j+1} done; P_j V_j may still run
    wg::FenceRegs<kWgFwdBN / 2>(s);
    W::template Mask<kCausal>(s, (j + 1) * kWgFwdBN, row0, p.seq_k, g, t);
    W::Softmax(s, m_run, l_run, alpha, scale_log2);
    wg::Wait<0>();
    wg::FenceRegs<D / 2>(o);
    W::Rescale(o, alpha);
    wg::PackA<kWgFwdBN, kBf16>(s, a);
  }
  if (kPipe) {
    wg::Fence();
    W::IssuePV(o, a, v_addr(n_blocks - 1));
    wg::Commit();
    wg::Wait<0>();
    wg::FenceRegs<D / 2>(o);
  }

  W::Store(o, m_run, l_run, static_cast<T*>(p.o) + b * p.so.b + h * p.so.h, p.so.r,
           p.lse != nullptr ? p.lse + bh * p.seq_q : nullptr, row0, p.seq_q, g, t);
}

}  // namespace loom::kernels::cuda::attention
