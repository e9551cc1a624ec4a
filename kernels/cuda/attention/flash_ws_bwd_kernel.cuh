// The warp-specialised flash backward kernels for Hopper (sm_90a).
//
// The dK/dV pass of the stored-dS backward: backward variants kBwdWsDsVariant (two consumer
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
//
// The one-pass backward (kBwdWsAtomicVariant): the same producer and
// per-tile products, and dQ in the same pass, as FA2 and FA3 do: each tile's
// dS goes to shared memory as [query][key], consumer c computes columns
// [64c, 64c + 64) of the tile's dQ = dS K over all the block's keys (one
// consumer per 64 columns: two at D 128, one at D 64), and adds them into
// the f32 accumulator p.dq_accum [B, H, Tq, D] with a tensor reduce
// (cp.reduce.async.bulk.tensor .add) from a swizzled staging tile. dS never
// leaves the SM: no workspace, 5 products; the reductions' order varies,
// so dQ's last bits vary run to run. BwdPreprocessKernel<D, T, true> zeroes
// the accumulator before, BwdConvertDqKernel scales and rounds it after.
//
// flash_ws.cu launches both; attention_emulation_test runs them on the CPU.
#pragma once

#include "kernels/cuda/attention/flash_wgmma_bwd_kernel.cuh"
#include "kernels/cuda/attention/flash_ws_fwd_kernel.cuh"

#include <type_traits>

namespace loom::kernels::cuda::attention {

// A query tile's lse (and delta) rows start at (b H + h) Tq + m0 of the flat
// [B H Tq] array, and a tensor copy's innermost start must sit on 16 bytes:
// so the producer copies kWsStatBox rows from the 4-row boundary at or
// before that start, and the consumers read from WsStatSkip rows in
// (m0 is a multiple of 64: the skip is that of the head's first row).
// (Rows past the array's end arrive as zeros; past seq_q P is 0 anyway.)
constexpr int kWsStatBox = kWgBwdBM + 4;
__device__ __forceinline__ int WsStatSkip(const FlashParams& p, int b, int h) {
  return static_cast<int>((static_cast<unsigned>(b * p.heads + h) * static_cast<unsigned>(p.seq_q)) & 3u);
}

// The kernels' parameters: tensor maps of k and v (box: 64 columns by the
// block's keys), q and dout (by kWgBwdBM rows), lse and delta (1-d, f32,
// boxes of kWgBwdBM), for the one-pass kernel dq_accum (f32 [B, H, Tq, D],
// boxes of 32 columns by kWgBwdBM rows, 128-byte swizzled), and the rest.
struct FlashWsBwdParams {
  tma::TmaMap k, v, q, dout, lse, delta, dq_accum;
  FlashParams p;
};

// What both backward kernels' shared memory starts with: K and V of the
// block's 64 NWG keys, then the ring of Q and dO tiles (kWsStages stages);
// and the register split between the producer and the NWG consumers.
template <int D, int NWG>
struct WsBwdRing {
  static constexpr int kBN = 64 * NWG;
  static constexpr int kKvBytes = kBN * D * 2, kTileBytes = kWgBwdBM * D * 2;
  // A stage's lse box, then its delta box kDeltaAt floats in (a tensor
  // copy lands on 128 bytes); the bytes the two copies bring.
  static constexpr int kDeltaAt = 96, kStatBytes = 2 * kDeltaAt * 4, kStatTx = 2 * kWsStatBox * 4;
  static constexpr int kQ = 2 * kKvBytes, kDo = kQ + kWsStages * kTileBytes, kRingEnd = kDo + kWsStages * kTileBytes;
  static constexpr int kMinBlocks = NWG == 1 ? 2 : 1;
  static constexpr int kLoadRegs = 24;
  static constexpr int kMmaRegs = NWG == 1 ? 232 : 240;
  static_assert((kLoadRegs * 128 + kMmaRegs * 128 * NWG) * kMinBlocks <= 65536, "register split exceeds the file");
  // The barriers (kv_full, q_full[S], q_empty[S]) at kBar, and alignment slack.
  static constexpr int SmemBytes(int bar) { return bar + 8 * (1 + 2 * kWsStages) + 1024; }
};

// The dK/dV pass: the ring; [lse, delta] x stages; the consumer warps' dS^T
// staging rows; the barriers.
template <int D, int NWG>
struct WsBwdLayout : WsBwdRing<D, NWG> {
  using R = WsBwdRing<D, NWG>;
  static constexpr int kStat = R::kRingEnd;
  static constexpr int kDs = kStat + kWsStages * R::kStatBytes;
  static constexpr int kBar = kDs + 4 * NWG * 16 * kWgBwdDsRow * 2;
  static constexpr int kSmemBytes = R::SmemBytes(kBar);
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

// The producer's one thread: K and V, then per tile Q, dO, lse and delta
// into the ring (the offsets of layout L: WsBwdLayout or WsAtomicLayout).
template <int D, class L>
__device__ __forceinline__ void WsBwdProduce(const FlashWsBwdParams& w, uint32_t base, const WsBwdTiles& tiles,
                                             int n0, int b) {
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
    tma::ArriveExpectTx(full, 2 * L::kTileBytes + L::kStatTx);
#pragma unroll
    for (int pn = 0; pn < D / 64; ++pn) {
      tma::Load(base + L::kQ + st * L::kTileBytes + pn * kWgBwdBM * 128, w.q, pn * 64, m0, h, b, full);
      tma::Load(base + L::kDo + st * L::kTileBytes + pn * kWgBwdBM * 128, w.dout, pn * 64, m0, h, b, full);
    }
    const int from = (b * w.p.heads + h) * w.p.seq_q + m0 - WsStatSkip(w.p, b, h);  // under 2^31 rows
    tma::Load1(base + L::kStat + st * L::kStatBytes, w.lse, from, full);
    tma::Load1(base + L::kStat + st * L::kStatBytes + L::kDeltaAt * 4, w.delta, from, full);
  }
}

// A consumer's tile `it` (query head h, rows from m0) up to the dK/dV
// updates: waits for its ring stage, issues S^T = K Q^T and dP^T = V dO^T
// for this consumer's keys (k_addr, v_addr) and waits for them, then forms
// P^T and dS^T (left in `as`) and issues dV += P^T dO and dK += dS^T Q (not
// waited for). L: the layout.
template <int D, class L, bool kBf16, bool kCausal>
__device__ __forceinline__ void WsBwdTileUpdates(const FlashParams& p, const unsigned char* smem, uint32_t base,
                                                 uint32_t q_full, int it, int b, int h, int m0, uint32_t k_addr,
                                                 uint32_t v_addr, int key0, int t, float* dk, float* dv,
                                                 uint32_t (*as)[4]) {
  const int st = it % kWsStages;
  const float* stat = reinterpret_cast<const float*>(smem + L::kStat + st * L::kStatBytes) +
                      WsStatSkip(p, b, h);
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
  BwdIssueUpdates<D, kBf16, kCausal, L::kDeltaAt>(s, dpt, stat, m0, key0, p.seq_q, p.seq_k, p.scale * kLog2e, t, dk,
                                                  dv, q_addr, do_addr, as);
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
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  tma::Wait(kv_full, 0);
  for (int it = 0; it < tiles.total; ++it) {
    const int st = it % kWsStages, m0 = tiles.M0(it);
    uint32_t as[kWgBwdBM / 16][4];
    WsBwdTileUpdates<D, L, kBf16, kCausal>(p, smem, base, q_full, it, b, tiles.Head(it), m0, k_addr, v_addr, key0, t,
                                           dk, dv, as);
    const int64_t bh = static_cast<int64_t>(b) * p.heads + tiles.Head(it);
    BwdStoreDs(as, sDs, static_cast<T*>(p.ds) + bh * p.ds_bh + m0, key_base, p.ds_keys, p.ds_ld, lane);
    wg::Wait<0>();
    wg::FenceRegs<D / 2>(dv);
    wg::FenceRegs<D / 2>(dk);
    tma::Arrive(q_empty + 8 * st);
  }
  BwdStoreDkDv<D, kBf16>(dk, dv, p, b, tiles.hk, key0, t);
}

// The one-pass kernel's shared memory: NWG = D / 64 consumers, one per 64
// columns of dQ, and 64 keys each.
template <int D>
struct WsAtomicLayout : WsBwdRing<D, D / 64> {
  using R = WsBwdRing<D, D / 64>;
  static constexpr int kNwg = D / 64;
  static constexpr int kDsBytes = kWgBwdBM * R::kBN * 2;  // a dS tile, [query][key]
  static constexpr int kDqBytes = kWgBwdBM * 64 * 4;      // a consumer's dQ columns in f32: two boxes of 32
  // The ring; dS x 2; dQ staging x consumers; [lse, delta] x stages; the barriers.
  static constexpr int kDs = R::kRingEnd, kDq = kDs + 2 * kDsBytes, kStat = kDq + kNwg * kDqBytes;
  static constexpr int kBar = kStat + kWsStages * R::kStatBytes;
  static constexpr int kSmemBytes = R::SmemBytes(kBar);
  static constexpr bool kFits = (kSmemBytes + 1024) * R::kMinBlocks <= 233472;
};

// dS of this thread's keys into the tile's [query][key] dS (SW128, panels of
// 64 keys: the K-major A operand of dQ = dS K). as: BwdIssueUpdates' dS^T
// fragments, whose register j of fragment kk holds key kl0 + 8 (j & 1) of
// the block and queries q, q + 1 (q = 16 kk + 8 (j >> 1) + 2t) in its halves.
template <typename T>
__device__ __forceinline__ void WsStoreDsT(const uint32_t (*as)[4], T* sds, int kl0, int t) {
  auto* h = reinterpret_cast<uint16_t*>(sds);
#pragma unroll
  for (int kk = 0; kk < kWgBwdBM / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = 16 * kk + 8 * (j >> 1) + 2 * t, kl = kl0 + 8 * (j & 1);
      h[wg::SwTile<kWgBwdBM>(q, kl)] = static_cast<uint16_t>(as[kk][j] & 0xFFFF);
      h[wg::SwTile<kWgBwdBM>(q + 1, kl)] = static_cast<uint16_t>(as[kk][j] >> 16);
    }
}

// This consumer's m64n64 dQ accumulator into its staging tile: two boxes of
// [64 rows][32 f32] (128-byte rows, 16-byte chunk c of row r at c ^ (r % 8)),
// the layout the dq_accum tensor map reduces from.
__device__ __forceinline__ void WsStoreDq(const float* dq, float* sdq, int warp, int g, int t) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int row = 16 * warp + g + 8 * rr, col = 8 * i + 2 * t, cc = col & 31;
      float* at = sdq + (col >> 5) * (kWgBwdBM * 32) + row * 32 + ((((cc >> 2) ^ (row & 7))) << 2) + (cc & 3);
      at[0] = dq[4 * i + 2 * rr];
      at[1] = dq[4 * i + 2 * rr + 1];
    }
}

// Consumer c of the one-pass kernel: the dK/dV pass's products for its 64
// keys, and columns [64c, 64c + 64) of each tile's dQ = dS K over all the
// block's keys, added into dq_accum by a tensor reduce. Per tile: dS goes to
// shared memory (two tiles alternate), every consumer meets at named
// barrier 1 (the tile's dS complete; two tiles back every product that read
// this buffer has retired), and after the products, named barrier 2 + c
// (the staging tile written) before its thread 0 issues the reduce; that
// thread waits for the previous reduce's read before barrier 1.
template <int D, bool kBf16, bool kCausal>
__device__ __forceinline__ void WsAtomicConsume(const FlashWsBwdParams& w, unsigned char* smem, uint32_t base,
                                                const WsBwdTiles& tiles, int n0, int b, int c) {
  using L = WsAtomicLayout<D>;
  using T = typename Elem<kBf16>::T;
  const FlashParams& p = w.p;
  const uint32_t kv_full = base + L::kBar, q_full = kv_full + 8, q_empty = q_full + 8 * kWsStages;
  const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int kl0 = c * 64 + warp * 16 + g, key0 = n0 + kl0;  // this thread's keys: key0, key0 + 8
  const uint32_t k_addr = base + c * 64 * 128, v_addr = base + L::kKvBytes + c * 64 * 128;
  const uint32_t kd_addr = base + c * L::kBN * 128;  // K's panel of columns [64c, 64c + 64)
  float* sdq = reinterpret_cast<float*>(smem + L::kDq + c * L::kDqBytes);
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  tma::Wait(kv_full, 0);
  for (int it = 0; it < tiles.total; ++it) {
    const int st = it % kWsStages, m0 = tiles.M0(it);
    const uint32_t ds_addr = base + L::kDs + (it & 1) * L::kDsBytes;
    uint32_t as[kWgBwdBM / 16][4];
    WsBwdTileUpdates<D, L, kBf16, kCausal>(p, smem, base, q_full, it, b, tiles.Head(it), m0, k_addr, v_addr, key0, t,
                                           dk, dv, as);
    WsStoreDsT(as, reinterpret_cast<T*>(smem + L::kDs + (it & 1) * L::kDsBytes), kl0, t);
    if (tid == 0) tma::BulkWaitRead<0>();  // the staging tile is free again
    wg::FenceProxyAsync();
    tma::NamedSync(1, 128 * L::kNwg);
    float dq[32];
    wg::Fence();
#pragma unroll
    for (int kk = 0; kk < L::kBN / 16; ++kk)
      wg::Mma<64, kBf16>::SSt(dq, wg::Desc(ds_addr + (kk / 4) * kWgBwdBM * 128 + (kk % 4) * 32, 16, 1024),
                              wg::Desc(kd_addr + kk * 16 * 128, L::kBN * 128, 1024), kk > 0);
    wg::Commit();
    wg::Wait<0>();
    wg::FenceRegs<D / 2>(dv);
    wg::FenceRegs<D / 2>(dk);
    wg::FenceRegs<32>(dq);
    tma::Arrive(q_empty + 8 * st);
    WsStoreDq(dq, sdq, warp, g, t);
    wg::FenceProxyAsync();
    tma::NamedSync(2 + c, 128);
    if (tid == 0) {
#pragma unroll
      for (int bx = 0; bx < 2; ++bx)
        tma::ReduceAdd(w.dq_accum, SmemAddr(sdq) + bx * kWgBwdBM * 128, 64 * c + 32 * bx, m0, tiles.Head(it), b);
      tma::BulkCommit();
    }
  }
  if (tid == 0) tma::BulkWaitRead<0>();
  BwdStoreDkDv<D, kBf16>(dk, dv, p, b, tiles.hk, key0, t);
}

template <int D, int NWG, bool kAtomicDq>
using WsBwdLayoutOf = std::conditional_t<kAtomicDq, WsAtomicLayout<D>, WsBwdLayout<D, NWG>>;

// Blocks of 128 (NWG + 1) threads over (key tiles of 64 NWG, kv heads,
// batch); dynamic shared memory WsBwdLayoutOf<D, NWG, kAtomicDq>::kSmemBytes.
// kAtomicDq: the one-pass kernel (NWG = D / 64), else the dK/dV pass.
template <int D, int NWG, bool kBf16, bool kCausal, bool kAtomicDq = false>
__global__ void __launch_bounds__(128 * (NWG + 1), WsBwdLayoutOf<D, NWG, kAtomicDq>::kMinBlocks)
    FlashBwdWsKernel(const LOOM_GRID_CONSTANT FlashWsBwdParams w) {
  using L = WsBwdLayoutOf<D, NWG, kAtomicDq>;
  static_assert(!kAtomicDq || NWG == D / 64, "the one-pass kernel has a consumer per 64 columns of dQ");
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
    if (threadIdx.x == 0) WsBwdProduce<D, L>(w, base, tiles, n0, b);
    return;
  }
  tma::RegAlloc<L::kMmaRegs>();
  const int c = (threadIdx.x >> 7) - 1;
  if constexpr (kAtomicDq) WsAtomicConsume<D, kBf16, kCausal>(w, smem, base, tiles, n0, b, c);
  else WsBwdConsume<D, NWG, kBf16, kCausal>(w.p, smem, base, tiles, n0, b, c);
}

}  // namespace loom::kernels::cuda::attention
