// Warp-specialised flash-attention forward for Hopper (sm_90a): variants
// kFwdWsVariant (two consumer warpgroups, BM 128), kFwdWs3Variant (three,
// BM 192) and kFwdWs1Variant (one, BM 64, two blocks per SM). Same contract
// and outputs as flash_wgmma_fwd_kernel.cuh (O and lse, causal top-left,
// GQA, strided operands, ragged ends); different division of labour:
//   - warpgroup 0 is the producer: it gives most of its registers away
//     (setmaxnreg) and one of its threads issues every load as a tensor copy
//     (TMA) of a 64-column panel into the 128-byte-swizzled tiles wgmma
//     reads: Q once, then K and V tiles into a ring of S stages (two, or
//     three for kFwdWsSt3Variant), each
//     stage guarded by a "full" mbarrier (the copy's bytes landed) and an
//     "empty" one (every consumer thread is done with it);
//   - the other warpgroups are consumers of 64 query rows each, with the
//     registers the producer gave up: per key tile S = Q K^T, the online
//     softmax and O += P V, pipelined as in the wgmma kernel (the next
//     tile's S is issued with this tile's P V, and its softmax runs while
//     P V is on the tensor cores);
//   - the consumers take turns at issuing their products (named barriers,
//     round robin), so one warpgroup's softmax runs while another's products
//     occupy the tensor cores.
// Rows past seq_q and keys past seq_k arrive as zeros (the tensor maps'
// bounds); keys past seq_k are masked as in the other kernels.
// flash_ws.cu launches it; attention_emulation_test runs it on the CPU
// through warp_emulator.h (mbarriers, tensor copies, named barriers).
#pragma once

#include "kernels/cuda/attention/flash_wgmma_fwd_kernel.cuh"
#include "kernels/cuda/attention/tma.cuh"

namespace loom::kernels::cuda::attention {

constexpr int kWsStages = 2;  // K and V tiles in flight (the default ring)

// Blocks per multiprocessor: one consumer warpgroup runs two blocks side by
// side (their turns are not coordinated), more run one.
constexpr int kMinBlocksFor(int nwg) { return nwg == 1 ? 2 : 1; }

// The kernel's parameters: a tensor map per input (box: 64 columns by the
// block's query rows for q, by kWgFwdBN keys for k and v) and the rest.
struct FlashWsParams {
  tma::TmaMap q, k, v;
  FlashParams p;
};

template <int D, int NWG, int S = kWsStages>
struct WsLayout {
  static constexpr int kStages = S;
  static constexpr int kBM = 64 * NWG;
  static constexpr int kQBytes = kBM * D * 2, kTileBytes = kWgFwdBN * D * 2;
  // Q, then the K stages, then the V stages (each 1024-byte aligned), then
  // the barriers: q_full, k_full[S], k_empty[S], v_full[S], v_empty[S].
  static constexpr int kBarOffset = kQBytes + 2 * S * kTileBytes;
  static constexpr int kSmemBytes = kBarOffset + 8 * (1 + 4 * S) + 1024;  // + alignment slack
  // Whether kMinBlocks blocks fit an SM's 228 KiB (1 KiB of it reserved per block).
  static constexpr bool kFits = (kSmemBytes + 1024) * kMinBlocksFor(NWG) <= 233472;
  static constexpr int kMinBlocks = kMinBlocksFor(NWG);
  // Registers per thread after reallocation: the producer keeps few, the
  // consumers share the rest of the block's part of the 64K (FA3's split).
  static constexpr int kLoadRegs = NWG == 3 ? 32 : 24;
  static constexpr int kMmaRegs = NWG == 1 ? 232 : NWG == 2 ? 240 : 160;
  static_assert((kLoadRegs * 128 + kMmaRegs * 128 * NWG) * kMinBlocks <= 65536, "register split exceeds the file");
};

// The producer's one thread: Q, then every K and V tile of the block in turn.
template <int D, int NWG, int S>
__device__ __forceinline__ void WsProduce(const FlashWsParams& w, uint32_t sq, uint32_t sk, uint32_t sv,
                                          uint32_t bars, int m0, int n_blocks, int h, int hk, int b) {
  using L = WsLayout<D, NWG, S>;
  const uint32_t q_full = bars, k_full = bars + 8, k_empty = k_full + 8 * S;
  const uint32_t v_full = k_empty + 8 * S, v_empty = v_full + 8 * S;
  tma::ArriveExpectTx(q_full, L::kQBytes);
#pragma unroll
  for (int pn = 0; pn < D / 64; ++pn) tma::Load(sq + pn * L::kBM * 128, w.q, pn * 64, m0, h, b, q_full);
  for (int j = 0; j < n_blocks; ++j) {
    const int st = j % S, ph = (j / S) & 1;
    const uint32_t kt = sk + st * L::kTileBytes, vt = sv + st * L::kTileBytes;
    tma::Wait(k_empty + 8 * st, ph ^ 1);
    tma::ArriveExpectTx(k_full + 8 * st, L::kTileBytes);
#pragma unroll
    for (int pn = 0; pn < D / 64; ++pn)
      tma::Load(kt + pn * kWgFwdBN * 128, w.k, pn * 64, j * kWgFwdBN, hk, b, k_full + 8 * st);
    tma::Wait(v_empty + 8 * st, ph ^ 1);
    tma::ArriveExpectTx(v_full + 8 * st, L::kTileBytes);
#pragma unroll
    for (int pn = 0; pn < D / 64; ++pn)
      tma::Load(vt + pn * kWgFwdBN * 128, w.v, pn * 64, j * kWgFwdBN, hk, b, v_full + 8 * st);
  }
}

// Named barrier of consumer warpgroup c (ids 1..NWG; 0 is __syncthreads'):
// c waits on its own before issuing products, then hands the turn to c + 1.
template <int NWG>
__device__ __forceinline__ void WsTakeTurn(int c) {
  if (NWG > 1) tma::NamedSync(1 + c, 256);
}
template <int NWG>
__device__ __forceinline__ void WsPassTurn(int c) {
  if (NWG > 1) tma::NamedArrive(1 + (c + 1) % NWG, 256);
}

template <int D, int NWG, int S, bool kBf16, bool kCausal>
__device__ __forceinline__ void WsConsume(const FlashParams& p, uint32_t sq, uint32_t sk, uint32_t sv, uint32_t bars,
                                          int m0, int n_blocks, int c, int b, int h) {
  using L = WsLayout<D, NWG, S>;
  using W = WgTile<D, L::kBM, kBf16>;
  const uint32_t q_full = bars, k_full = bars + 8, k_empty = k_full + 8 * S;
  const uint32_t v_full = k_empty + 8 * S, v_empty = v_full + 8 * S;
  const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int row0 = m0 + c * 64 + warp * 16;
  const uint32_t q_addr = sq + c * 64 * 128;
  auto k_tile = [&](int j) { return sk + (j % S) * L::kTileBytes; };
  auto v_tile = [&](int j) { return sv + (j % S) * L::kTileBytes; };
  auto parity = [](int j) { return (j / S) & 1; };
  const float scale_log2 = p.scale * kLog2e;
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f}, alpha[2];
  float s[kWgFwdBN / 2];
  uint32_t a[kWgFwdBN / 16][4];

  // The last warpgroup starts the round with the first's turn.
  if (NWG > 1 && c == NWG - 1) tma::NamedArrive(1, 256);
  tma::Wait(q_full, 0);
  tma::Wait(k_full, 0);
  WsTakeTurn<NWG>(c);
  wg::Fence();
  W::IssueS(s, q_addr, k_tile(0));
  wg::Commit();
  if (n_blocks > 1 || c != NWG - 1) WsPassTurn<NWG>(c);
  wg::Wait<0>();
  wg::FenceRegs<kWgFwdBN / 2>(s);
  tma::Arrive(k_empty);
  W::template Mask<kCausal>(s, 0, row0, p.seq_k, g, t);
  W::Softmax(s, m_run, l_run, alpha, scale_log2);
  wg::PackA<kWgFwdBN, kBf16>(s, a);

  for (int j = 0; j + 1 < n_blocks; ++j) {
    // S_{j+1} and P_j V_j on the tensor cores, then S_{j+1}'s softmax while
    // P_j V_j runs.
    tma::Wait(k_full + 8 * ((j + 1) % S), parity(j + 1));
    WsTakeTurn<NWG>(c);
    wg::Fence();
    W::IssueS(s, q_addr, k_tile(j + 1));
    wg::Commit();
    tma::Wait(v_full + 8 * (j % S), parity(j));
    wg::Fence();
    W::IssuePV(o, a, v_tile(j));
    wg::Commit();
    if (j + 2 < n_blocks || c != NWG - 1) WsPassTurn<NWG>(c);
    wg::Wait<1>();
    wg::FenceRegs<kWgFwdBN / 2>(s);
    tma::Arrive(k_empty + 8 * ((j + 1) % S));
    W::template Mask<kCausal>(s, (j + 1) * kWgFwdBN, row0, p.seq_k, g, t);
    W::Softmax(s, m_run, l_run, alpha, scale_log2);
    wg::Wait<0>();
    wg::FenceRegs<D / 2>(o);
    tma::Arrive(v_empty + 8 * (j % S));
    W::Rescale(o, alpha);
    wg::PackA<kWgFwdBN, kBf16>(s, a);
  }
  const int last = n_blocks - 1;
  tma::Wait(v_full + 8 * (last % S), parity(last));
  wg::Fence();
  W::IssuePV(o, a, v_tile(last));
  wg::Commit();
  wg::Wait<0>();
  wg::FenceRegs<D / 2>(o);
  tma::Arrive(v_empty + 8 * (last % S));

  using T = typename Elem<kBf16>::T;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  W::Store(o, m_run, l_run, static_cast<T*>(p.o) + b * p.so.b + h * p.so.h, p.so.r,
           p.lse != nullptr ? p.lse + bh * p.seq_q : nullptr, row0, p.seq_q, g, t);
}

// Blocks of 128 (NWG + 1) threads over (query tiles of 64 NWG rows, heads,
// batch), a ring of S stages; dynamic shared memory WsLayout<D, NWG, S>::kSmemBytes.
template <int D, int NWG, int S, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(128 * (NWG + 1), kMinBlocksFor(NWG))
    FlashFwdWsKernel(const LOOM_GRID_CONSTANT FlashWsParams w) {
  using L = WsLayout<D, NWG, S>;
  const FlashParams& p = w.p;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t sq = SmemAddr(reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023}));
  const uint32_t sk = sq + L::kQBytes, sv = sk + S * L::kTileBytes, bars = sq + L::kBarOffset;

  const int m_block = gridDim.x - 1 - blockIdx.x;  // heavy causal blocks first
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads / p.kv_heads);
  const int m0 = m_block * L::kBM;
  int n_blocks = (p.seq_k + kWgFwdBN - 1) / kWgFwdBN;
  if (kCausal) n_blocks = min(n_blocks, (m0 + L::kBM - 1 + kWgFwdBN) / kWgFwdBN);

  const int wgi = threadIdx.x >> 7;
  if (threadIdx.x == 0) {
    tma::MbarInit(bars, 1);  // q_full
    for (int st = 0; st < S; ++st) {
      tma::MbarInit(bars + 8 + 8 * st, 1);                    // k_full
      tma::MbarInit(bars + 8 + 8 * (S + st), 128 * NWG);      // k_empty
      tma::MbarInit(bars + 8 + 8 * (2 * S + st), 1);          // v_full
      tma::MbarInit(bars + 8 + 8 * (3 * S + st), 128 * NWG);  // v_empty
    }
    tma::FenceMbarInit();
  }
  __syncthreads();
  if (wgi == 0) {
    tma::RegDealloc<L::kLoadRegs>();
    if (threadIdx.x == 0) WsProduce<D, NWG, S>(w, sq, sk, sv, bars, m0, n_blocks, h, hk, b);
    return;
  }
  tma::RegAlloc<L::kMmaRegs>();
  WsConsume<D, NWG, S, kBf16, kCausal>(p, sq, sk, sv, bars, m0, n_blocks, wgi - 1, b, h);
}

}  // namespace loom::kernels::cuda::attention
