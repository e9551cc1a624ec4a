// The dK/dV pass of the stored-dS flash backward, warp-specialised for
// Hopper (sm_90a): backward variants kBwdWsDsVariant (two consumer
// warpgroups, 128 keys a block) and kBwdWsDs1Variant (one, 64 keys, two
// blocks per SM). It computes what FlashBwdWgmmaKernel
// (flash_wgmma_bwd_kernel.cuh) computes, with the same per-tile products
// and helpers, and writes the same dS^T tiles for FlashBwdDqFromDsKernel;
// what differs is who loads:
//   - warpgroup 0 is the producer: it gives most of its registers away, and
//     one of its threads issues every load as a tensor copy (TMA): the
//     block's K and V once, then per (query head, 64-row query tile) the Q
//     and dO tiles (128-byte swizzled, as wgmma reads them) and the tile's
//     lse and delta (runs of the flat [B H Tq] f32 arrays) into a ring of
//     kWsStages stages, each guarded by a "full" and an "empty" mbarrier;
//   - the consumers own 64 keys each, keep dK and dV in registers and never
//     wait on each other (no __syncthreads in the loop).
// Query rows past seq_q arrive as zeros and get P = 0 (BwdTileProbs), so
// the lse read past a head's last row (the next head's) is never used.
// flash_ws.cu launches it; attention_emulation_test runs it on the CPU.
#pragma once

#include "kernels/cuda/attention/flash_wgmma_bwd_kernel.cuh"
#include "kernels/cuda/attention/flash_ws_fwd_kernel.cuh"

namespace loom::kernels::cuda::attention {

// The kernel's parameters: tensor maps of k and v (box: 64 columns by the
// block's keys), q and dout (by kWgBwdBM rows), lse and delta (1-d, f32,
// boxes of kWgBwdBM), and the rest.
struct FlashWsBwdParams {
  tma::TmaMap k, v, q, dout, lse, delta;
  FlashParams p;
};

template <int D, int NWG>
struct WsBwdLayout {
  static constexpr int kBN = 64 * NWG;
  static constexpr int kKvBytes = kBN * D * 2, kTileBytes = kWgBwdBM * D * 2, kStatBytes = 2 * kWgBwdBM * 4;
  // K, V; Q x stages; dO x stages; [lse, delta] x stages; the consumer
  // warps' dS^T staging rows; the barriers: kv_full, q_full[S], q_empty[S].
  static constexpr int kQ = 2 * kKvBytes, kDo = kQ + kWsStages * kTileBytes, kStat = kDo + kWsStages * kTileBytes;
  static constexpr int kDs = kStat + kWsStages * kStatBytes;
  static constexpr int kBar = kDs + 4 * NWG * 16 * kWgBwdDsRow * 2;
  static constexpr int kSmemBytes = kBar + 8 * (1 + 2 * kWsStages) + 1024;
  static constexpr int kMinBlocks = NWG == 1 ? 2 : 1;
  static constexpr int kLoadRegs = 24;
  static constexpr int kMmaRegs = NWG == 1 ? 232 : 240;
  static_assert((kLoadRegs * 128 + kMmaRegs * 128 * NWG) * kMinBlocks <= 65536, "register split exceeds the file");
};

// The tiles a block visits: every query head of its GQA group, and every
// 64-row query tile (causal: from the tile of its first key).
struct WsBwdTiles {
  int m_begin, m_count, total, group, hk;
  __device__ __forceinline__ WsBwdTiles(const FlashParams& p, int n0, int hk_, bool causal) : hk(hk_) {
    group = p.heads / p.kv_heads;
    m_begin = causal ? n0 / kWgBwdBM : 0;
    m_count = max(0, (p.seq_q + kWgBwdBM - 1) / kWgBwdBM - m_begin);
    total = group * m_count;
  }
  __device__ __forceinline__ int Head(int it) const { return hk * group + it / m_count; }
  __device__ __forceinline__ int M0(int it) const { return (m_begin + it % m_count) * kWgBwdBM; }
};

template <int D, int NWG>
__device__ __forceinline__ void WsBwdProduce(const FlashWsBwdParams& w, uint32_t base, const WsBwdTiles& tiles,
                                             int n0, int b) {
  using L = WsBwdLayout<D, NWG>;
  const uint32_t kv_full = base + L::kBar, q_full = kv_full + 8, q_empty = q_full + 8 * kWsStages;
  tma::ArriveExpectTx(kv_full, 2 * L::kKvBytes);
#pragma unroll
  for (int pn = 0; pn < D / 64; ++pn) {
    tma::Load(base + pn * L::kBN * 128, w.k, pn * 64, n0, tiles.hk, b, kv_full);
    tma::Load(base + L::kKvBytes + pn * L::kBN * 128, w.v, pn * 64, n0, tiles.hk, b, kv_full);
  }
  for (int it = 0; it < tiles.total; ++it) {
    const int st = it % kWsStages, ph = (it / kWsStages) & 1;
    const int h = tiles.Head(it), m0 = tiles.M0(it);
    const uint32_t full = q_full + 8 * st;
    tma::Wait(q_empty + 8 * st, ph ^ 1);
    tma::ArriveExpectTx(full, 2 * L::kTileBytes + L::kStatBytes);
#pragma unroll
    for (int pn = 0; pn < D / 64; ++pn) {
      tma::Load(base + L::kQ + st * L::kTileBytes + pn * kWgBwdBM * 128, w.q, pn * 64, m0, h, b, full);
      tma::Load(base + L::kDo + st * L::kTileBytes + pn * kWgBwdBM * 128, w.dout, pn * 64, m0, h, b, full);
    }
    const int row = (b * w.p.heads + h) * w.p.seq_q + m0;
    tma::Load1(base + L::kStat + st * L::kStatBytes, w.lse, row, full);
    tma::Load1(base + L::kStat + st * L::kStatBytes + kWgBwdBM * 4, w.delta, row, full);
  }
}

template <int D, int NWG, bool kBf16, bool kCausal>
__device__ __forceinline__ void WsBwdConsume(const FlashParams& p, unsigned char* smem, uint32_t base,
                                             const WsBwdTiles& tiles, int n0, int b, int c) {
  using L = WsBwdLayout<D, NWG>;
  using T = typename Elem<kBf16>::T;
  const uint32_t kv_full = base + L::kBar, q_full = kv_full + 8, q_empty = q_full + 8 * kWsStages;
  const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int key_base = n0 + c * 64 + warp * 16, key0 = key_base + g;  // this thread's keys: key0, key0 + 8
  T* sDs = reinterpret_cast<T*>(smem + L::kDs) + (c * 4 + warp) * 16 * kWgBwdDsRow;
  const uint32_t k_addr = base + c * 64 * 128, v_addr = base + L::kKvBytes + c * 64 * 128;
  const float scale_log2 = p.scale * kLog2e;
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  tma::Wait(kv_full, 0);
  for (int it = 0; it < tiles.total; ++it) {
    const int st = it % kWsStages;
    const int m0 = tiles.M0(it);
    const uint32_t q_addr = base + L::kQ + st * L::kTileBytes, do_addr = base + L::kDo + st * L::kTileBytes;
    tma::Wait(q_full + 8 * st, (it / kWsStages) & 1);
    float s[kWgBwdBM / 2], dpt[kWgBwdBM / 2];
    wg::Fence();
    IssueKeyQuery<D, L::kBN, kBf16>(s, k_addr, q_addr);
    IssueKeyQuery<D, L::kBN, kBf16>(dpt, v_addr, do_addr);
    wg::Commit();
    wg::Wait<0>();
    wg::FenceRegs<kWgBwdBM / 2>(s);
    wg::FenceRegs<kWgBwdBM / 2>(dpt);
    uint32_t as[kWgBwdBM / 16][4];
    BwdIssueUpdates<D, kBf16, kCausal>(s, dpt, reinterpret_cast<const float*>(smem + L::kStat + st * L::kStatBytes),
                                       m0, key0, p.seq_q, p.seq_k, scale_log2, t, dk, dv, q_addr, do_addr, as);
    const int64_t bh = static_cast<int64_t>(b) * p.heads + tiles.Head(it);
    BwdStoreDs(as, sDs, static_cast<T*>(p.ds) + bh * p.ds_bh + m0, key_base, p.ds_keys, p.ds_ld, lane);
    wg::Wait<0>();
    wg::FenceRegs<D / 2>(dv);
    wg::FenceRegs<D / 2>(dk);
    tma::Arrive(q_empty + 8 * st);
  }
  BwdStoreDkDv<D, kBf16>(dk, dv, p, b, tiles.hk, key0, t);
}

// Blocks of 128 (NWG + 1) threads over (key tiles of 64 NWG, kv heads,
// batch); dynamic shared memory WsBwdLayout<D, NWG>::kSmemBytes.
template <int D, int NWG, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(128 * (NWG + 1), WsBwdLayout<D, NWG>::kMinBlocks)
    FlashBwdWsKernel(const LOOM_GRID_CONSTANT FlashWsBwdParams w) {
  using L = WsBwdLayout<D, NWG>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t base = SmemAddr(smem);
  const int b = blockIdx.z, n0 = blockIdx.x * L::kBN;
  const WsBwdTiles tiles(w.p, n0, blockIdx.y, kCausal);
  if (threadIdx.x == 0) {
    tma::MbarInit(base + L::kBar, 1);  // kv_full
    for (int st = 0; st < kWsStages; ++st) {
      tma::MbarInit(base + L::kBar + 8 + 8 * st, 1);                          // q_full
      tma::MbarInit(base + L::kBar + 8 + 8 * (kWsStages + st), 128 * NWG);    // q_empty
    }
    tma::FenceMbarInit();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    tma::RegDealloc<L::kLoadRegs>();
    if (threadIdx.x == 0) WsBwdProduce<D, NWG>(w, base, tiles, n0, b);
    return;
  }
  tma::RegAlloc<L::kMmaRegs>();
  WsBwdConsume<D, NWG, kBf16, kCausal>(w.p, smem, base, tiles, n0, b, (threadIdx.x >> 7) - 1);
}

}  // namespace loom::kernels::cuda::attention
