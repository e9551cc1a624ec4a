// Flash-attention backward for sm_90 (FlashAttention-2 schedule on mma.sync).
// Three schemes, all starting with (1) delta = rowsum(dO * O) per query row:
//  - stored dS (kBwdDsVariant; the default while its workspace, B H Tq Tk
//    elements, is at most FlashDsLimitBytes()): (2) FlashBwdKernel<kDqStoreDs>
//    computes dK and dV and writes each dS^T tile to the workspace; (3)
//    FlashBwdDqFromDsKernel: dQ = scale * dS K, one plain product. 5 matrix
//    products in all, deterministic; the cost is the dS traffic (written
//    once, read once).
//  - two passes (the other default): (2) FlashBwdKernel<kDqSeparate>: dK and
//    dV only; (3) FlashBwdDqKernel: dQ by its own pass over the keys,
//    recomputing S and dP (7 products), summed in registers; deterministic,
//    no workspace beyond delta.
//  - atomic dQ (kBwdAtomicVariant): (1) also zeroes an f32 dQ accumulator,
//    (2) FlashBwdKernel<kDqAtomic> adds dS K into it with 16-byte vector
//    reductions, (3) BwdConvertDqKernel (dQ = scale * accumulator, rounded):
//    5 products, but contended atomics, and dQ's last bits vary run to run.
//
// FlashBwdKernel gives one block of NW warps BN = 16 NW keys of one (batch, kv
// head); each warp owns 16 keys and keeps their dK and dV in registers. The
// block walks every query head of its GQA group and every query tile of BM
// rows (causal: only tiles at or past its first key), with Q and dO tiles
// double-buffered by cp.async. Per tile, with P recomputed from the saved lse:
//   S^T = K Q^T, P^T = exp(S^T * scale - lse), dV += P^T dO,
//   dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q,
// (atomic and stored-dS variants: then dS^T goes through shared memory, to
// the f32 accumulator as dS K or to the workspace as is). dK and dV are deterministic: summed in
// registers, GQA heads included, with no atomics.
// The kernels themselves (device code only): flash_bwd.cu launches them, and
// attention_emulation_test.cc runs them on the CPU through flash_common.cuh's
// warp emulation (LOOM_ATTN_EMULATE).
#pragma once

#include <cfloat>

#include "kernels/cuda/attention/flash_common.cuh"
#include "kernels/cuda/attention/flash_kernels.h"
#include "kernels/cuda/attention/flash_variants.h"

namespace loom::kernels::cuda::attention {


// dK/dV kernel configuration: NW warps (BN = 16 NW keys), query tile BM,
// register budget for MB blocks per SM.
template <int NW_, int BM_, int MB_>
struct BwdCfg {
  static constexpr int NW = NW_, BN = 16 * NW_, BM = BM_, MB = MB_, NT = 32 * NW_;
  static constexpr int SmemBytes(int d, bool atomic_dq) {
    return (2 * BN * d + 4 * BM * d + (atomic_dq ? BN * BM : 0)) * 2;
  }
};
// dQ kernel configuration: NW warps (BM = 16 NW query rows), key tile BN.
template <int NW_, int BN_, int MB_>
struct DqCfg {
  static constexpr int NW = NW_, BM = 16 * NW_, BN = BN_, MB = MB_, NT = 32 * NW_;
  static constexpr int SmemBytes(int d) { return (2 * BM * d + 4 * BN * d) * 2; }
};

// The compiled configurations: flash_variants.h.
template <int D>
using BwdAtomicCfg = BwdCfg<LOOM_BWD_ATOMIC_NW, LOOM_BWD_ATOMIC_BM, 1>;
// The stored-dS variant's first pass: 64 keys x 64 queries per tile (kDsTile).
using BwdDsCfg = BwdCfg<4, 64, 1>;
// Its dQ pass: warps per block (32 query rows each).
constexpr int kDqFromDsWarps = 4;

// delta = rowsum(dO * O) per query row (and, with kZeroAccum, the row's f32
// dQ accumulator cleared). kPreLanes<D> lanes share a row, 8 elements each:
// one 16-byte load of O and one of dO per lane where the operands allow it
// (16-byte aligned, strides in whole 8-element chunks), element loads where
// not. A warp read one row with 2-byte loads before: 20 us at B8 H12 T1024
// D64 for 25 MB.
template <int D>
constexpr int kPreLanes = D / 8;
template <int D>
constexpr int kPreRows = 256 / kPreLanes<D>;  // query rows per 256-thread block

// Grid (ceil(Tq / kPreRows<D>), H, B), 256 threads.
template <int D, bool kBf16, bool kZeroAccum>
__global__ void __launch_bounds__(256) BwdPreprocessKernel(FlashParams p) {
  static_assert(D % 8 == 0 && kPreLanes<D> <= 32 && (kPreLanes<D> & (kPreLanes<D> - 1)) == 0, "head dim");
  using E = Elem<kBf16>;
  using T = typename E::T;
  constexpr int L = kPreLanes<D>;
  const int j = threadIdx.x % L, tq = blockIdx.x * kPreRows<D> + threadIdx.x / L;
  const int h = blockIdx.y, b = blockIdx.z;
  const bool valid = tq < p.seq_q;  // no early return: the row's lanes all reach the shuffles
  const int64_t row = (static_cast<int64_t>(b) * p.heads + h) * p.seq_q + tq;
  const T* o = static_cast<const T*>(p.o) + b * p.so.b + h * p.so.h + tq * p.so.r;
  const T* d = static_cast<const T*>(p.dout) + b * p.sdo.b + h * p.sdo.h + tq * p.sdo.r;
  const bool vec = ((reinterpret_cast<uintptr_t>(p.o) | reinterpret_cast<uintptr_t>(p.dout)) % 16 == 0) &&
                   ((p.so.b | p.so.h | p.so.r | p.sdo.b | p.sdo.h | p.sdo.r) % 8 == 0);
  float acc = 0.f;
  if (valid && vec) {
    const uint4 ou = *reinterpret_cast<const uint4*>(o + 8 * j), du = *reinterpret_cast<const uint4*>(d + 8 * j);
    T oe[8], de[8];  // copied, not cast: the host compile of the emulation test keeps to aliasing rules
    memcpy(oe, &ou, sizeof(oe));
    memcpy(de, &du, sizeof(de));
#pragma unroll
    for (int i = 0; i < 8; ++i) acc += E::ToF(oe[i]) * E::ToF(de[i]);
  } else if (valid) {
    for (int i = j; i < D; i += L) acc += E::ToF(o[i]) * E::ToF(d[i]);
  }
#pragma unroll
  for (int off = L / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (!valid) return;
  if (j == 0) p.delta[row] = acc;
  if (!kZeroAccum) return;
  float* acc_row = p.dq_accum + row * D;
  for (int i = j; i < D; i += L) acc_row[i] = 0.f;
}

// dQ = scale * the contiguous f32 accumulator, rounded and written with dq's
// strides; grid and lanes as BwdPreprocessKernel's (kPreLanes<D> lanes a
// row, 8 elements each): two 16-byte loads a lane, and one 16-byte store
// where dq allows it (16-byte aligned, strides in whole 8-element chunks),
// element stores where not. A grid-stride loop over elements with 64-bit
// divisions took 185 us at B4 H16 T4096 D128 on the H100.
template <int D, bool kBf16>
__global__ void __launch_bounds__(256) BwdConvertDqKernel(FlashParams p) {
  using E = Elem<kBf16>;
  using T = typename E::T;
  constexpr int L = kPreLanes<D>;
  const int j = threadIdx.x % L, tq = blockIdx.x * kPreRows<D> + threadIdx.x / L;
  const int h = blockIdx.y, b = blockIdx.z;
  if (tq >= p.seq_q) return;
  const float* acc = p.dq_accum + ((static_cast<int64_t>(b) * p.heads + h) * p.seq_q + tq) * D + 8 * j;
  T* out = static_cast<T*>(p.dq) + b * p.sdq.b + h * p.sdq.h + tq * p.sdq.r + 8 * j;
  const uint4 a0 = reinterpret_cast<const uint4*>(acc)[0], a1 = reinterpret_cast<const uint4*>(acc)[1];
  float v[8];
  memcpy(v, &a0, sizeof(a0));
  memcpy(v + 4, &a1, sizeof(a1));
  T r[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) r[i] = E::FromF(v[i] * p.scale);
  if (reinterpret_cast<uintptr_t>(p.dq) % 16 == 0 && (p.sdq.b | p.sdq.h | p.sdq.r) % 8 == 0) {
    uint4 u;
    memcpy(&u, r, sizeof(u));
    *reinterpret_cast<uint4*>(out) = u;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = r[i];
  }
}

// What FlashBwdKernel does about dQ.
enum DqMode : int {
  kDqSeparate = 0,  // nothing: FlashBwdDqKernel recomputes S and dP (default)
  kDqAtomic = 1,    // dQ += dS K into the f32 accumulator with vector atomics
  kDqStoreDs = 2,   // dS^T tiles to the workspace; FlashBwdDqFromDsKernel sums dQ
};

template <int D, class Cfg, int kDqMode, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(Cfg::NT, Cfg::MB) FlashBwdKernel(FlashParams p) {
  constexpr bool kAtomicDq = kDqMode == kDqAtomic, kStoreDs = kDqMode == kDqStoreDs;
  using E = Elem<kBf16>;
  using T = typename E::T;
  constexpr int BN = Cfg::BN, BM = Cfg::BM, NT = Cfg::NT;
  constexpr int QW = BM / 16, DW = Cfg::NW / QW > 0 ? Cfg::NW / QW : 1, DC = D / DW;  // dQ: warp tiling
  static_assert(!kAtomicDq || QW * DW == Cfg::NW, "atomic dQ: warps must tile (BM/16) x (D parts)");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + BN * D;
  T* sQ = sV + BN * D;       // 2 stages
  T* sdO = sQ + 2 * BM * D;  // 2 stages
  T* sdS = sdO + 2 * BM * D; // [BN keys][BM queries]

  const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = n_block * BN;
  const T* k = static_cast<const T*>(p.k) + b * p.sk.b + hk * p.sk.h;
  const T* v = static_cast<const T*>(p.v) + b * p.sv.b + hk * p.sv.h;
  const int m_begin = kCausal ? n0 / BM : 0;
  const int m_count = max(0, (p.seq_q + BM - 1) / BM - m_begin);
  const int total = group * m_count;
  auto q_of = [&](int it) {
    const int64_t h = hk * group + it / m_count;
    return static_cast<const T*>(p.q) + b * p.sq.b + h * p.sq.h;
  };
  auto do_of = [&](int it) {
    const int64_t h = hk * group + it / m_count;
    return static_cast<const T*>(p.dout) + b * p.sdo.b + h * p.sdo.h;
  };
  // Atomic variant: the key blocks of one head start at different query tiles
  // (rotated by the block index), so that they do not all add into the same
  // dQ rows at the same time.
  const int m_rot = kAtomicDq && m_count > 0 ? n_block % m_count : 0;
  auto m0_of = [&](int it) {
    int m = it % m_count + m_rot;
    if (m >= m_count) m -= m_count;
    return (m_begin + m) * BM;
  };

  LoadTile<D, BN, NT>(sK, k, p.sk.r, n0, p.seq_k, tid);
  LoadTile<D, BN, NT>(sV, v, p.sv.r, n0, p.seq_k, tid);
  if (total > 0) {
    LoadTile<D, BM, NT>(sQ, q_of(0), p.sq.r, m0_of(0), p.seq_q, tid);
    LoadTile<D, BM, NT>(sdO, do_of(0), p.sdo.r, m0_of(0), p.seq_q, tid);
  }
  CpAsyncCommit();

  const float scale_log2 = p.scale * kLog2e;
  const int kw0 = warp * 16;
  const int key_a = n0 + kw0 + g;  // this thread's keys: key_a, key_a + 8
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    if (it + 1 < total) {
      LoadTile<D, BM, NT>(sQ + (stage ^ 1) * BM * D, q_of(it + 1), p.sq.r, m0_of(it + 1), p.seq_q, tid);
      LoadTile<D, BM, NT>(sdO + (stage ^ 1) * BM * D, do_of(it + 1), p.sdo.r, m0_of(it + 1), p.seq_q, tid);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const int64_t bh = static_cast<int64_t>(b) * p.heads + hk * group + it / m_count;
    const int m0 = m0_of(it);
    const T* cQ = sQ + stage * BM * D;
    const T* cdO = sdO + stage * BM * D;

    // S^T = K Q^T and dP^T = V dO^T: 16 keys x BM queries per warp.
    float st[BM / 8][4], dpt[BM / 8][4];
#pragma unroll
    for (int i = 0; i < BM / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[i][e] = dpt[i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ak[4], av[4];
      Ldsm4(ak, SmemAddr(sK + Swz<D>(kw0 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
      Ldsm4(av, SmemAddr(sV + Swz<D>(kw0 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
#pragma unroll
      for (int np = 0; np < BM / 16; ++np) {
        const int row = np * 16 + (lane >> 4) * 8 + (lane & 7), col = kk * 16 + ((lane >> 3) & 1) * 8;
        uint32_t r[4];
        Ldsm4(r, SmemAddr(cQ + Swz<D>(row, col)));
        E::Mma(st[2 * np], ak, r[0], r[1]);
        E::Mma(st[2 * np + 1], ak, r[2], r[3]);
        Ldsm4(r, SmemAddr(cdO + Swz<D>(row, col)));
        E::Mma(dpt[2 * np], av, r[0], r[1]);
        E::Mma(dpt[2 * np + 1], av, r[2], r[3]);
      }
    }
    // P^T and dS^T = P^T (dP^T - delta).
    const float* lse = p.lse + bh * p.seq_q;
    const float* delta = p.delta + bh * p.seq_q;
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int q = m0 + nt * 8 + 2 * t + c;
        const bool q_ok = q < p.seq_q;
        const float l2 = q_ok ? lse[q] * kLog2e : INFINITY;
        const float dl = q_ok ? delta[q] : 0.f;
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const int e = 2 * rr + c, key = key_a + rr * 8;
          float pv = Exp2(st[nt][e] * scale_log2 - l2);
          if (key >= p.seq_k || (kCausal && key > q)) pv = 0.f;
          st[nt][e] = pv;
          dpt[nt][e] = pv * (dpt[nt][e] - dl);
        }
      }
    // dV += P^T dO and dK += dS^T Q.
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      uint32_t ap[4] = {E::Pack(st[2 * kk][0], st[2 * kk][1]), E::Pack(st[2 * kk][2], st[2 * kk][3]),
                        E::Pack(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                        E::Pack(st[2 * kk + 1][2], st[2 * kk + 1][3])};
      uint32_t as[4] = {E::Pack(dpt[2 * kk][0], dpt[2 * kk][1]), E::Pack(dpt[2 * kk][2], dpt[2 * kk][3]),
                        E::Pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                        E::Pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        const int row = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), col = dp * 16 + (lane >> 4) * 8;
        uint32_t r[4];
        Ldsm4T(r, SmemAddr(cdO + Swz<D>(row, col)));
        E::Mma(dv[2 * dp], ap, r[0], r[1]);
        E::Mma(dv[2 * dp + 1], ap, r[2], r[3]);
        Ldsm4T(r, SmemAddr(cQ + Swz<D>(row, col)));
        E::Mma(dk[2 * dp], as, r[0], r[1]);
        E::Mma(dk[2 * dp + 1], as, r[2], r[3]);
      }
    }
    // dS^T to shared memory for dQ (atomic and stored-dS variants; else FlashBwdDqKernel).
    if (kAtomicDq || kStoreDs) {
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr)
          *reinterpret_cast<uint32_t*>(sdS + Swz<BM>(kw0 + g + rr * 8, nt * 8 + 2 * t)) =
              E::Pack(dpt[nt][2 * rr], dpt[nt][2 * rr + 1]);
    }
    __syncthreads();  // also orders this tile's reads before the next prefetch
    // Stored-dS variant: the BN x BM tile of dS^T to the workspace, 16 bytes a
    // store ([bh][key][query], rows ds_ld apart). Every visited tile is
    // written whole (zeros past seq_q, seq_k and the causal diagonal).
    if (kStoreDs) {
      constexpr int kChunks = BM / 8;
      T* dst = static_cast<T*>(p.ds) + bh * p.ds_bh + static_cast<int64_t>(n0) * p.ds_ld + m0;
      for (int i = tid; i < BN * kChunks; i += NT) {
        const int r = i / kChunks, c = i % kChunks;
        Copy16(dst + r * p.ds_ld + c * 8, sdS + Swz<BM>(r, c * 8));
      }
    }
    // dQ[q, :] += dS[q, keys] K[keys, :]: warp = (query tile qt, column part dpart).
    if (kAtomicDq) {
      const int qt = warp % QW, dpart = warp / QW;
      float acc[DC / 8][4];
#pragma unroll
      for (int i = 0; i < DC / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const int mi = lane >> 3;
        uint32_t a[4];
        Ldsm4T(a, SmemAddr(sdS + Swz<BM>(kk * 16 + (mi >> 1) * 8 + (lane & 7), qt * 16 + (mi & 1) * 8)));
#pragma unroll
        for (int dp = 0; dp < DC / 16; ++dp) {
          uint32_t r[4];
          Ldsm4T(r, SmemAddr(sK + Swz<D>(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7),
                                         dpart * DC + dp * 16 + (lane >> 4) * 8)));
          E::Mma(acc[2 * dp], a, r[0], r[1]);
          E::Mma(acc[2 * dp + 1], a, r[2], r[3]);
        }
      }
      // Lanes t and t^1 swap half their C fragments so that each holds 4
      // consecutive columns of one row (even t: row g, odd t: row g + 8); then
      // one 16-byte vector reduction per 8 columns.
      float* dqa = p.dq_accum + bh * p.seq_q * D;
      const bool odd = t & 1;
      const int q = m0 + qt * 16 + g + (odd ? 8 : 0);
      float* dst_row = dqa + static_cast<int64_t>(q) * D + dpart * DC + 4 * (t >> 1);
#pragma unroll
      for (int dt = 0; dt < DC / 8; ++dt) {
        const float s0 = odd ? acc[dt][0] : acc[dt][2], s1 = odd ? acc[dt][1] : acc[dt][3];
        const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
        if (q < p.seq_q) {
          if (odd)
            RedAddV4(dst_row + dt * 8, r0, r1, acc[dt][2], acc[dt][3]);
          else
            RedAddV4(dst_row + dt * 8, acc[dt][0], acc[dt][1], r0, r1);
        }
      }
    }
  }

  // dK (times scale) and dV of this warp's 16 keys.
  T* dkp = static_cast<T*>(p.dk) + b * p.sdk.b + hk * p.sdk.h;
  T* dvp = static_cast<T*>(p.dv) + b * p.sdv.b + hk * p.sdv.h;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int key = key_a + rr * 8;
    if (key < p.seq_k) {
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        const int col = dt * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(dkp + key * p.sdk.r + col) =
            E::Pack(dk[dt][2 * rr] * p.scale, dk[dt][2 * rr + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dvp + key * p.sdv.r + col) = E::Pack(dv[dt][2 * rr], dv[dt][2 * rr + 1]);
      }
    }
  }
}

// dQ by its own pass (the default): one block of NW warps per BM = 16 NW
// query rows of one (batch, head) walks the key tiles it can see (K/V double
// buffered), recomputes P from lse and dS = P (dO V^T - delta), and sums
// dQ = scale * dS K in registers: a fixed summation order, no atomics.
template <int D, class Cfg, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(Cfg::NT, Cfg::MB) FlashBwdDqKernel(FlashParams p) {
  using E = Elem<kBf16>;
  using T = typename E::T;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, NT = Cfg::NT;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + BM * D;
  T* sK = sdO + BM * D;      // 2 stages
  T* sV = sK + 2 * BN * D;   // 2 stages

  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads / p.kv_heads);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = m_block * BM;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const T* q = static_cast<const T*>(p.q) + b * p.sq.b + h * p.sq.h;
  const T* dout = static_cast<const T*>(p.dout) + b * p.sdo.b + h * p.sdo.h;
  const T* k = static_cast<const T*>(p.k) + b * p.sk.b + hk * p.sk.h;
  const T* v = static_cast<const T*>(p.v) + b * p.sv.b + hk * p.sv.h;
  int n_blocks = (p.seq_k + BN - 1) / BN;
  if (kCausal) n_blocks = min(n_blocks, (m0 + BM - 1 + BN) / BN);

  LoadTile<D, BM, NT>(sQ, q, p.sq.r, m0, p.seq_q, tid);
  LoadTile<D, BM, NT>(sdO, dout, p.sdo.r, m0, p.seq_q, tid);
  LoadTile<D, BN, NT>(sK, k, p.sk.r, 0, p.seq_k, tid);
  LoadTile<D, BN, NT>(sV, v, p.sv.r, 0, p.seq_k, tid);
  CpAsyncCommit();

  const float scale_log2 = p.scale * kLog2e;
  const int row_a = m0 + warp * 16 + g;  // rows row_a, row_a + 8
  float l2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_a + r * 8;
    l2[r] = row < p.seq_q ? p.lse[bh * p.seq_q + row] * kLog2e : INFINITY;
    dl[r] = row < p.seq_q ? p.delta[bh * p.seq_q + row] : 0.f;
  }
  uint32_t qf[D / 16][4], df[D / 16][4];
  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  for (int j = 0; j < n_blocks; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_blocks) {
      LoadTile<D, BN, NT>(sK + (stage ^ 1) * BN * D, k, p.sk.r, (j + 1) * BN, p.seq_k, tid);
      LoadTile<D, BN, NT>(sV + (stage ^ 1) * BN * D, v, p.sv.r, (j + 1) * BN, p.seq_k, tid);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Ldsm4(qf[kk], SmemAddr(sQ + Swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
        Ldsm4(df[kk], SmemAddr(sdO + Swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
      }
    }
    const T* cK = sK + stage * BN * D;
    const T* cV = sV + stage * BN * D;
    // S = Q K^T and dP = dO V^T: 16 rows x 64 keys per warp.
    float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        const int row = np * 16 + (lane >> 4) * 8 + (lane & 7), col = kk * 16 + ((lane >> 3) & 1) * 8;
        uint32_t r[4];
        Ldsm4(r, SmemAddr(cK + Swz<D>(row, col)));
        E::Mma(s[2 * np], qf[kk], r[0], r[1]);
        E::Mma(s[2 * np + 1], qf[kk], r[2], r[3]);
        Ldsm4(r, SmemAddr(cV + Swz<D>(row, col)));
        E::Mma(dp[2 * np], df[kk], r[0], r[1]);
        E::Mma(dp[2 * np + 1], df[kk], r[2], r[3]);
      }
    }
    // dS = P (dP - delta), P = exp(S * scale - lse).
    const int n0 = j * BN;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + nt * 8 + 2 * t + (e & 1), row = row_a + (e >> 1) * 8;
        float pv = Exp2(s[nt][e] * scale_log2 - l2[e >> 1]);
        if (col >= p.seq_k || (kCausal && col > row)) pv = 0.f;
        s[nt][e] = pv * (dp[nt][e] - dl[e >> 1]);
      }
    // dQ += dS K.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4] = {E::Pack(s[2 * kk][0], s[2 * kk][1]), E::Pack(s[2 * kk][2], s[2 * kk][3]),
                       E::Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), E::Pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dq2 = 0; dq2 < D / 16; ++dq2) {
        uint32_t r[4];
        Ldsm4T(r, SmemAddr(cK + Swz<D>(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), dq2 * 16 + (lane >> 4) * 8)));
        E::Mma(acc[2 * dq2], a, r[0], r[1]);
        E::Mma(acc[2 * dq2 + 1], a, r[2], r[3]);
      }
    }
    __syncthreads();
  }
  T* dq = static_cast<T*>(p.dq) + b * p.sdq.b + h * p.sdq.h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_a + r * 8;
    if (row < p.seq_q) {
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<uint32_t*>(dq + row * p.sdq.r + dt * 8 + 2 * t) =
            E::Pack(acc[dt][2 * r] * p.scale, acc[dt][2 * r + 1] * p.scale);
    }
  }
}

// Stored-dS variant, second pass: dQ = scale * dS K as a plain product over
// the dS^T tiles FlashBwdKernel<kDqStoreDs> left in the workspace (one matrix
// product instead of FlashBwdDqKernel's three; a fixed summation order). One
// block of NW warps per BM = 32 NW query rows of one (batch, head); each warp
// owns 32 rows (two m16 groups, so every K fragment read from shared memory
// feeds two products) and walks the key tiles of kDsTile keys, dS^T and K
// double-buffered by cp.async. Causal: a warp stops at the key tile of its own
// rows' kDsTile-row tile, the last tile the first pass wrote for them.
constexpr int kDsTile = 64;  // the first pass's key and query tiles (BwdDsCfg)

template <int D, int NW, bool kBf16, bool kCausal>
__global__ void __launch_bounds__(32 * NW, 2) FlashBwdDqFromDsKernel(FlashParams p) {
  using E = Elem<kBf16>;
  using T = typename E::T;
  constexpr int BN = kDsTile, BM = 32 * NW, NT = 32 * NW;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sdS = reinterpret_cast<T*>(smem_raw);  // 2 stages of [BN keys][BM queries]
  T* sK = sdS + 2 * BN * BM;                 // 2 stages of [BN keys][D]

  const int m0 = (gridDim.x - 1 - blockIdx.x) * BM;
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads / p.kv_heads);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const T* ds = static_cast<const T*>(p.ds) + bh * p.ds_bh + m0;
  const T* k = static_cast<const T*>(p.k) + b * p.sk.b + hk * p.sk.h;
  int n_tiles = p.ds_keys / BN;
  if (kCausal) n_tiles = min(n_tiles, (m0 + BM - 1) / BN + 1);
  const int r0 = m0 + warp * 32;                  // this warp's rows r0 .. r0 + 31
  const int last_tile = kCausal ? r0 / BN : n_tiles;  // causal: key tiles 0 .. r0 / BN

  LoadTile<BM, BN, NT>(sdS, ds, p.ds_ld, 0, p.ds_keys, tid);
  LoadTile<D, BN, NT>(sK, k, p.sk.r, 0, p.seq_k, tid);
  CpAsyncCommit();
  float acc[2][D / 8][4];
#pragma unroll
  for (int mw = 0; mw < 2; ++mw)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) acc[mw][i][0] = acc[mw][i][1] = acc[mw][i][2] = acc[mw][i][3] = 0.f;

  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_tiles) {
      LoadTile<BM, BN, NT>(sdS + (stage ^ 1) * BN * BM, ds, p.ds_ld, (j + 1) * BN, p.ds_keys, tid);
      LoadTile<D, BN, NT>(sK + (stage ^ 1) * BN * D, k, p.sk.r, (j + 1) * BN, p.seq_k, tid);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    if (j <= last_tile) {
      const T* cS = sdS + stage * BN * BM;
      const T* cK = sK + stage * BN * D;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const int mi = lane >> 3;
        uint32_t a[2][4];
#pragma unroll
        for (int mw = 0; mw < 2; ++mw)
          Ldsm4T(a[mw], SmemAddr(cS + Swz<BM>(kk * 16 + (mi >> 1) * 8 + (lane & 7), warp * 32 + mw * 16 + (mi & 1) * 8)));
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t r[4];
          Ldsm4T(r, SmemAddr(cK + Swz<D>(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), dp * 16 + (lane >> 4) * 8)));
#pragma unroll
          for (int mw = 0; mw < 2; ++mw) {
            E::Mma(acc[mw][2 * dp], a[mw], r[0], r[1]);
            E::Mma(acc[mw][2 * dp + 1], a[mw], r[2], r[3]);
          }
        }
      }
    }
    __syncthreads();
  }
  T* dq = static_cast<T*>(p.dq) + b * p.sdq.b + h * p.sdq.h;
#pragma unroll
  for (int mw = 0; mw < 2; ++mw)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int row = r0 + mw * 16 + g + rr * 8;
      if (row < p.seq_q) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
          *reinterpret_cast<uint32_t*>(dq + row * p.sdq.r + dt * 8 + 2 * t) =
              E::Pack(acc[mw][dt][2 * rr] * p.scale, acc[mw][dt][2 * rr + 1] * p.scale);
      }
    }
}

}  // namespace loom::kernels::cuda::attention
