// The dK/dV pass of the stored-dS flash backward on Hopper's warpgroup
// products (sm_90a wgmma): backward variants kBwdWgmmaDsVariant and
// kBwdWgmmaDs1Variant (two warpgroups a block, or one). It computes
// what FlashBwdKernel<kDqStoreDs> computes (flash_bwd_kernel.cuh) and writes
// the same dS^T tiles, so FlashBwdDqFromDsKernel then sums dQ from them:
//   - a block is NWG warpgroups (two, or one: smaller blocks, more per SM)
//     and BN = 64 NWG keys of one (batch, kv head), 64 keys per warpgroup; K and V stay in shared memory
//     (wgmma.cuh's 128-byte-swizzled layout) and dK, dV in registers;
//   - it walks every query head of its GQA group and every 64-row query tile
//     (causal: from the tile of its first key), Q and dO (and the tile's
//     lse and delta) double-buffered by cp.async; per tile and warpgroup:
//       S^T = K Q^T and dP^T = V dO^T (shared x shared, m64n64),
//       P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - delta) on the
//       accumulators,
//       dV += P^T dO and dK += dS^T Q (registers x shared through the
//       transpose bit, m64nD), while dS^T goes to the workspace through
//       a per-warp staging buffer in shared memory (whole 16-byte rows);
//   - dK is scaled once at the end. Deterministic: no atomics.
// Visited tiles are written whole (zeros past seq_q, seq_k and the causal
// diagonal), rows past the workspace's ds_keys skipped.
// flash_wgmma_bwd.cu launches it (sm_90a code); attention_emulation_test runs
// it on the CPU through warp_emulator.h's warpgroup products.
#pragma once

#include "kernels/cuda/attention/flash_common.cuh"
#include "kernels/cuda/attention/flash_kernels.h"
#include "kernels/cuda/attention/wgmma.cuh"

namespace loom::kernels::cuda::attention {

constexpr int kWgBwdBM = 64;  // queries per tile
// dS^T staging row, elements: 144 bytes apart, so the fragment writes meet no
// bank conflict.
constexpr int kWgBwdDsRow = 72;

template <int D, int BN>
constexpr int BwdSmemBytes() {
  // K, V; Q and dO x 2 stages; the query tile's lse and delta x 2 stages; the
  // warps' dS^T staging rows (16 keys each); alignment slack
  return (2 * BN * D + 4 * kWgBwdBM * D) * 2 + 4 * kWgBwdBM * 4 + BN * kWgBwdDsRow * 2 + 1024;
}

// S^T or dP^T for this warpgroup's 64 keys x the tile's 64 queries: A = the
// key-side tile rows (K or V, 128 rows), B = the query-side tile (Q or dO).
template <int D, int BN, bool kBf16>
__device__ __forceinline__ void IssueKeyQuery(float* acc, uint32_t key_addr, uint32_t query_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    wg::Mma<kWgBwdBM, kBf16>::SS(acc, wg::Desc(key_addr + (kk / 4) * BN * 128 + (kk % 4) * 32, 16, 1024),
                            wg::Desc(query_addr + (kk / 4) * kWgBwdBM * 128 + (kk % 4) * 32, 16, 1024), kk > 0);
}

// acc (64 keys x D) += A (64 keys x 64 queries, registers) times the query
// tile [query][d] (MN-major for this product: the transpose bit).
template <int D, bool kBf16>
__device__ __forceinline__ void IssueAccumulate(float* acc, const uint32_t (*a)[4], uint32_t query_addr) {
#pragma unroll
  for (int kk = 0; kk < kWgBwdBM / 16; ++kk)
    wg::Mma<D, kBf16>::template RS<1>(acc, a[kk], wg::Desc(query_addr + kk * 16 * 128, kWgBwdBM * 128, 1024), 1);
}

// P^T and dS^T = P^T (dP^T - delta) on the accumulators of S^T and dP^T
// for this thread's keys key0, key0 + 8 and the tile's 64 queries from m0:
// element 4i + 2rr + c is key key0 + 8rr, query m0 + 8i + 2t + c. stat: the
// tile's lse, then its delta (kDeltaAt further). P is 0 past seq_q, past
// seq_k and (causal) above the diagonal.
template <bool kCausal, int kDeltaAt = kWgBwdBM>
__device__ __forceinline__ void BwdTileProbs(float* st, float* dpt, const float* stat, int m0, int key0, int seq_q,
                                             int seq_k, float scale_log2, int t) {
#pragma unroll
  for (int i = 0; i < kWgBwdBM / 8; ++i)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int q = m0 + 8 * i + 2 * t + c;
      const float l2 = stat[8 * i + 2 * t + c] * kLog2e;
      const float dl = stat[kDeltaAt + 8 * i + 2 * t + c];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int e = 4 * i + 2 * rr + c, key = key0 + 8 * rr;
        float pv = Exp2(st[e] * scale_log2 - l2);
        if (q >= seq_q || key >= seq_k || (kCausal && key > q)) pv = 0.f;
        st[e] = pv;
        dpt[e] = pv * (dpt[e] - dl);
      }
    }
}

// From the tile's S^T and dP^T accumulators (BwdTileProbs' arguments): P^T
// and dS^T, then dV += P^T dO and dK += dS^T Q issued and committed (not
// waited for); dS^T stays in `as`, the A fragments those products read.
template <int D, bool kBf16, bool kCausal, int kDeltaAt = kWgBwdBM>
__device__ __forceinline__ void BwdIssueUpdates(float* s, float* dpt, const float* stat, int m0, int key0, int seq_q,
                                                int seq_k, float scale_log2, int t, float* dk, float* dv,
                                                uint32_t q_addr, uint32_t do_addr, uint32_t (*as)[4]) {
  BwdTileProbs<kCausal, kDeltaAt>(s, dpt, stat, m0, key0, seq_q, seq_k, scale_log2, t);
  uint32_t ap[kWgBwdBM / 16][4];
  wg::PackA<kWgBwdBM, kBf16>(s, ap);
  wg::PackA<kWgBwdBM, kBf16>(dpt, as);
  wg::Fence();
  IssueAccumulate<D, kBf16>(dv, ap, do_addr);
  IssueAccumulate<D, kBf16>(dk, as, q_addr);
  wg::Commit();
}

// dS^T of this warp's 16 keys (from key_base) x the tile's 64 queries to the
// workspace (ds: the tile's first query of row 0; rows ds_ld apart, those
// from ds_keys on skipped), through the warp's staging rows sDs: fragment
// kk, register j holds key g + 8 (j & 1) of the warp's 16, queries
// 16kk + 8 (j >> 1) + 2t, +1 of the tile; then each row goes out as eight
// 16-byte stores, whole sectors (the fragments' own 4-byte stores
// half-filled each one: the backward took 0.290 ms, not 0.249, at B8 H12
// T1024 D64; docs/perf.md).
template <typename T>
__device__ __forceinline__ void BwdStoreDs(const uint32_t (*as)[4], T* sDs, T* ds, int key_base, int ds_keys,
                                           int64_t ds_ld, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr)
#pragma unroll
    for (int kk = 0; kk < kWgBwdBM / 16; ++kk) {
      *reinterpret_cast<uint32_t*>(sDs + (g + 8 * rr) * kWgBwdDsRow + 16 * kk + 2 * t) = as[kk][rr];
      *reinterpret_cast<uint32_t*>(sDs + (g + 8 * rr) * kWgBwdDsRow + 16 * kk + 8 + 2 * t) = as[kk][2 + rr];
    }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = j * 32 + lane, r = c >> 3, col = (c & 7) * 8;
    if (key_base + r < ds_keys)
      *reinterpret_cast<uint4*>(ds + static_cast<int64_t>(key_base + r) * ds_ld + col) =
          *reinterpret_cast<const uint4*>(sDs + r * kWgBwdDsRow + col);
  }
}

// dK (times scale) and dV of keys key0, key0 + 8 of kv head hk: element
// 4i + 2rr + c is key key0 + 8rr, column 8i + 2t + c.
template <int D, bool kBf16>
__device__ __forceinline__ void BwdStoreDkDv(const float* dk, const float* dv, const FlashParams& p, int b, int hk,
                                             int key0, int t) {
  using E = Elem<kBf16>;
  using T = typename E::T;
  T* dkp = static_cast<T*>(p.dk) + b * p.sdk.b + hk * p.sdk.h;
  T* dvp = static_cast<T*>(p.dv) + b * p.sdv.b + hk * p.sdv.h;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int key = key0 + 8 * rr;
    if (key < p.seq_k) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        const int col = 8 * i + 2 * t;
        *reinterpret_cast<uint32_t*>(dkp + key * p.sdk.r + col) =
            E::Pack(dk[4 * i + 2 * rr] * p.scale, dk[4 * i + 2 * rr + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dvp + key * p.sdv.r + col) = E::Pack(dv[4 * i + 2 * rr], dv[4 * i + 2 * rr + 1]);
      }
    }
  }
}

// Blocks per multiprocessor the register budget is set for. At D 64 one
// warpgroup needs 198-201 registers unbounded (two blocks per SM); capped at
// 168 (three blocks, 0-12 bytes of spills) the backward runs 6% faster on the
// H200 (B8 H12 T1024: 0.336 ms against 0.357; docs/perf.md). At D 128 the
// accumulators alone take 128 registers: one.
template <int D, int NWG>
constexpr int kBwdMinBlocks = (D == 64 && NWG == 1) ? 3 : 1;

template <int D, int NWG, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(128 * NWG, kBwdMinBlocks<D, NWG>) FlashBwdWgmmaKernel(FlashParams p) {
  constexpr int kBN = 64 * NWG, kNT = 128 * NWG;
  using T = typename Elem<kBf16>::T;
  extern __shared__ unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  T* sV = sK + kBN * D;
  T* sQ = sV + kBN * D;        // 2 stages
  T* sdO = sQ + 2 * kWgBwdBM * D;  // 2 stages
  float* sStat = reinterpret_cast<float*>(sdO + 2 * kWgBwdBM * D);  // 2 stages of [lse x kWgBwdBM, delta x kWgBwdBM]
  // This warp's 16 keys x 64 queries of dS^T on their way to the workspace.
  T* sDs = reinterpret_cast<T*>(sStat + 4 * kWgBwdBM) + (threadIdx.x >> 5) * 16 * kWgBwdDsRow;

  const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int tid = threadIdx.x, wgi = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = n_block * kBN;
  const int key0 = n0 + wgi * 64 + warp * 16 + g;  // this thread's keys: key0, key0 + 8
  const T* k = static_cast<const T*>(p.k) + b * p.sk.b + hk * p.sk.h;
  const T* v = static_cast<const T*>(p.v) + b * p.sv.b + hk * p.sv.h;
  const int m_begin = kCausal ? n0 / kWgBwdBM : 0;
  const int m_count = max(0, (p.seq_q + kWgBwdBM - 1) / kWgBwdBM - m_begin);
  const int total = group * m_count;
  auto head_of = [&](int it) { return static_cast<int64_t>(hk) * group + it / m_count; };
  auto m0_of = [&](int it) { return (m_begin + it % m_count) * kWgBwdBM; };
  auto load_q_do = [&](int it) {
    const int64_t h = head_of(it);
    const int st = it & 1;
    wg::LoadSw<D, kWgBwdBM, kNT>(sQ + st * kWgBwdBM * D, static_cast<const T*>(p.q) + b * p.sq.b + h * p.sq.h, p.sq.r,
                            m0_of(it), p.seq_q, tid);
    wg::LoadSw<D, kWgBwdBM, kNT>(sdO + st * kWgBwdBM * D, static_cast<const T*>(p.dout) + b * p.sdo.b + h * p.sdo.h,
                            p.sdo.r, m0_of(it), p.seq_q, tid);
    if (tid < 2 * kWgBwdBM) {  // thread i < kWgBwdBM: lse of query m0 + i; the next kWgBwdBM: its delta
      const int i = tid % kWgBwdBM, q = m0_of(it) + i;
      const int64_t row = (static_cast<int64_t>(b) * p.heads + h) * p.seq_q + q;
      float* dst = sStat + st * 2 * kWgBwdBM + tid;
      if (q < p.seq_q) CpAsync4(SmemAddr(dst), tid < kWgBwdBM ? p.lse + row : p.delta + row);
      else *dst = tid < kWgBwdBM ? INFINITY : 0.f;  // past the end: P = 0
    }
  };

  wg::LoadSw<D, kBN, kNT>(sK, k, p.sk.r, n0, p.seq_k, tid);
  wg::LoadSw<D, kBN, kNT>(sV, v, p.sv.r, n0, p.seq_k, tid);
  if (total > 0) load_q_do(0);
  CpAsyncCommit();

  const float scale_log2 = p.scale * kLog2e;
  const uint32_t k_addr = SmemAddr(sK) + wgi * 64 * 128, v_addr = SmemAddr(sV) + wgi * 64 * 128;
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    if (it + 1 < total) load_q_do(it + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    wg::FenceProxyAsync();
    __syncthreads();
    const int64_t bh = static_cast<int64_t>(b) * p.heads + head_of(it);
    const int m0 = m0_of(it);
    const uint32_t q_addr = SmemAddr(sQ + stage * kWgBwdBM * D), do_addr = SmemAddr(sdO + stage * kWgBwdBM * D);

    float st[kWgBwdBM / 2], dpt[kWgBwdBM / 2];
    wg::Fence();
    IssueKeyQuery<D, kBN, kBf16>(st, k_addr, q_addr);
    IssueKeyQuery<D, kBN, kBf16>(dpt, v_addr, do_addr);
    wg::Commit();
    wg::Wait<0>();
    wg::FenceRegs<kWgBwdBM / 2>(st);
    wg::FenceRegs<kWgBwdBM / 2>(dpt);
    uint32_t as[kWgBwdBM / 16][4];
    BwdIssueUpdates<D, kBf16, kCausal>(st, dpt, sStat + stage * 2 * kWgBwdBM, m0, key0, p.seq_q, p.seq_k, scale_log2,
                                       t, dk, dv, q_addr, do_addr, as);
    BwdStoreDs(as, sDs, static_cast<T*>(p.ds) + bh * p.ds_bh + m0, n0 + wgi * 64 + warp * 16, p.ds_keys, p.ds_ld,
               lane);
    wg::Wait<0>();
    wg::FenceRegs<D / 2>(dv);
    wg::FenceRegs<D / 2>(dk);
    __syncthreads();  // this stage's reads done before it is refilled
  }

  BwdStoreDkDv<D, kBf16>(dk, dv, p, b, hk, key0, t);
}

}  // namespace loom::kernels::cuda::attention
