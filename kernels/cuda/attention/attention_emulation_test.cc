// Runs the flash-attention kernels themselves (flash_fwd_kernel.cuh,
// flash_bwd_kernel.cuh) on the CPU through warp_emulator.h and compares o,
// lse, dq, dk, dv with the fp64 reference: a GPU-free check of the kernels'
// fragment layouts, swizzles, tiling, masking and GQA indexing. Small shapes
// (the emulator is slow); bf16 and f16, D 64 and 128, causal and not, GQA,
// T not a multiple of the tiles, Tq != Tk, and every compiled kernel variant.
// Grids mirror flash_fwd.cu and flash_bwd.cu's launchers.
#include <cmath>
#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/attention/attention_reference.h"
#include "kernels/cuda/attention/flash_bwd_kernel.cuh"
#include "kernels/cuda/attention/flash_fwd_kernel.cuh"
#include "kernels/cuda/attention/flash_wgmma_bwd_kernel.cuh"
#include "kernels/cuda/attention/flash_wgmma_fwd_kernel.cuh"
#include "kernels/cuda/attention/flash_ws_bwd_kernel.cuh"
#include "kernels/cuda/attention/flash_ws_fwd_kernel.cuh"

namespace loom::kernels::cuda::attention {
namespace {

struct Case {
  bool bf16;
  int b, h, hkv, tq, tk, d;
  bool causal;
  int fwd_variant = 0, bwd_variant = 0, dq_variant = 0;  // 0: the defaults
  // q/k/v (and dq/dk/dv) as windows of one [B, T, 3, H, D] buffer, o and dout
  // [B, T, H, D] (needs h == hkv, tq == tk).
  bool strided = false;
};

template <int D, class Cfg, bool kBf16, bool kCausal>
void ForwardCfg(const FlashParams& p) {
  emu::Launch({static_cast<unsigned>((p.seq_q + Cfg::BM - 1) / Cfg::BM), static_cast<unsigned>(p.heads),
               static_cast<unsigned>(p.batch)},
              Cfg::NT, [&] { FlashFwdKernel<D, Cfg, kBf16, kCausal>(p); });
}
// Mirrors flash_wgmma.cu's Launch: blocks of NWG warpgroups, 64 NWG queries.
template <int D, int NWG, bool kBf16, bool kCausal, bool kPipe>
void ForwardWgmma(const FlashParams& p) {
  emu::Launch({static_cast<unsigned>((p.seq_q + 64 * NWG - 1) / (64 * NWG)), static_cast<unsigned>(p.heads),
               static_cast<unsigned>(p.batch)},
              128 * NWG, [&] { FlashFwdWgmmaKernel<D, NWG, kBf16, kCausal, kPipe>(p); });
}
// Mirrors flash_ws.cu's EncodeTmaMap4d: a [B, heads, T, D] tensor as a 4-d map.
// elem: bytes an element (2; 4 for the f32 dQ accumulator, in boxes of 32 columns).
tma::TmaMap WsMap(const void* base, int d, int t, int heads, int batch, const TensorStrides& st, int box_rows,
                  int elem = 2) {
  tma::TmaMap m;
  m.base = static_cast<const unsigned char*>(base);
  m.dim[0] = d, m.dim[1] = t, m.dim[2] = heads, m.dim[3] = batch;
  m.stride[1] = st.r * elem, m.stride[2] = st.h * elem, m.stride[3] = st.b * elem;
  m.box_rows = box_rows;
  m.elem = elem, m.box_cols = 128 / elem;
  return m;
}
// Mirrors flash_ws.cu's launcher: a producer warpgroup and NWG consumers.
template <int D, int NWG, bool kBf16, bool kCausal, int S = kWsStages>
void ForwardWs(const FlashParams& p) {
  FlashWsParams w;
  w.p = p;
  w.q = WsMap(p.q, D, p.seq_q, p.heads, p.batch, p.sq, 64 * NWG);
  w.k = WsMap(p.k, D, p.seq_k, p.kv_heads, p.batch, p.sk, kWgFwdBN);
  w.v = WsMap(p.v, D, p.seq_k, p.kv_heads, p.batch, p.sv, kWgFwdBN);
  emu::Launch({static_cast<unsigned>((p.seq_q + 64 * NWG - 1) / (64 * NWG)), static_cast<unsigned>(p.heads),
               static_cast<unsigned>(p.batch)},
              128 * (NWG + 1), [&] { FlashFwdWsKernel<D, NWG, S, kBf16, kCausal>(w); });
}
// Mirrors flash_ws.cu's EncodeTmaMap1d: a flat f32 array, in boxes of `box`.
tma::TmaMap WsMap1d(const float* base, int64_t n, int box) {
  tma::TmaMap m;
  m.base = reinterpret_cast<const unsigned char*>(base);
  m.dim[0] = n;
  m.box_cols = box;
  m.elem = 4, m.swizzle = false;
  return m;
}
// Mirrors flash_ws.cu's backward launchers: the dK/dV pass with a producer
// warpgroup and NWG consumers, or the one-pass kernel (kAtomicDq, NWG = D /
// 64) with the f32 dQ accumulator as a 4-d map in boxes of 32 columns.
template <int D, int NWG, bool kBf16, bool kCausal, bool kAtomicDq = false>
void BackwardWs(const FlashParams& p) {
  FlashWsBwdParams w;
  w.p = p;
  w.k = WsMap(p.k, D, p.seq_k, p.kv_heads, p.batch, p.sk, 64 * NWG);
  w.v = WsMap(p.v, D, p.seq_k, p.kv_heads, p.batch, p.sv, 64 * NWG);
  w.q = WsMap(p.q, D, p.seq_q, p.heads, p.batch, p.sq, kWgBwdBM);
  w.dout = WsMap(p.dout, D, p.seq_q, p.heads, p.batch, p.sdo, kWgBwdBM);
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  w.lse = WsMap1d(p.lse, rows, kWsStatBox);
  w.delta = WsMap1d(p.delta, rows, kWsStatBox);
  const TensorStrides acc{static_cast<int64_t>(p.heads) * p.seq_q * D, static_cast<int64_t>(p.seq_q) * D, D};
  w.dq_accum = WsMap(p.dq_accum, D, p.seq_q, p.heads, p.batch, acc, kWgBwdBM, 4);
  emu::Launch({static_cast<unsigned>((p.seq_k + 64 * NWG - 1) / (64 * NWG)), static_cast<unsigned>(p.kv_heads),
               static_cast<unsigned>(p.batch)},
              128 * (NWG + 1), [&] { FlashBwdWsKernel<D, NWG, kBf16, kCausal, kAtomicDq>(w); });
}
// Mirrors flash_fwd.cu on a compute-capability-9.0 device.
template <int D, bool kBf16, bool kCausal>
void Forward(const FlashParams& p) {
  const int v = p.fwd_variant > 0 ? p.fwd_variant : FwdDefaultVariant(D);
  if (v == kFwdWgmmaVariant) return ForwardWgmma<D, 2, kBf16, kCausal, false>(p);
  if (v == kFwdWgmmaPipeVariant) return ForwardWgmma<D, 2, kBf16, kCausal, true>(p);
  if (v == kFwdWgmmaPipe1Variant) return ForwardWgmma<D, 1, kBf16, kCausal, true>(p);
  if (IsWsFwdVariant(v)) {
    if (WsStages(v) == 3) return ForwardWs<D, D == 128 ? 2 : 1, kBf16, kCausal, 3>(p);
    if (D == 128) return ForwardWs<D, 2, kBf16, kCausal>(p);
    const int wgs = WsWarpgroups(v, D);
    if (wgs == 1) return ForwardWs<D, 1, kBf16, kCausal>(p);
    return wgs == 2 ? ForwardWs<D, 2, kBf16, kCausal>(p) : ForwardWs<D, 3, kBf16, kCausal>(p);
  }
  switch (v) {
#define LOOM_FWD_CASE(id, nw, bn, mb, mw) \
  case id:                            \
    return ForwardCfg<D, FwdCfg<nw, bn, mb, mw>, kBf16, kCausal>(p);
    LOOM_FWD_VARIANTS(LOOM_FWD_CASE)
#undef LOOM_FWD_CASE
  }
  FAIL() << "no forward variant " << p.fwd_variant;
}
template <int D, class Cfg, int kMode, bool kBf16, bool kCausal>
void DkDv(const FlashParams& p) {
  emu::Launch({static_cast<unsigned>((p.seq_k + Cfg::BN - 1) / Cfg::BN), static_cast<unsigned>(p.kv_heads),
               static_cast<unsigned>(p.batch)},
              Cfg::NT, [&] { FlashBwdKernel<D, Cfg, kMode, kBf16, kCausal>(p); });
}
template <int D, class Cfg, bool kBf16, bool kCausal>
void Dq(const FlashParams& p) {
  emu::Launch({static_cast<unsigned>((p.seq_q + Cfg::BM - 1) / Cfg::BM), static_cast<unsigned>(p.heads),
               static_cast<unsigned>(p.batch)},
              Cfg::NT, [&] { FlashBwdDqKernel<D, Cfg, kBf16, kCausal>(p); });
}
// Mirrors flash_bwd.cu's Bwd3.
template <int D, bool kBf16, bool kCausal>
void Backward(const FlashParams& p) {
  const int bv = p.bwd_variant > 0 ? p.bwd_variant : BwdDefaultVariant(D);
  if (IsAtomicDqVariant(bv)) {
    emu::Launch({static_cast<unsigned>((p.seq_q + kPreRows<D> - 1) / kPreRows<D>), static_cast<unsigned>(p.heads),
                 static_cast<unsigned>(p.batch)},
                256, [&] { BwdPreprocessKernel<D, kBf16, true>(p); });
    if (bv == kBwdWsAtomicVariant) BackwardWs<D, D / 64, kBf16, kCausal, true>(p);
    else DkDv<D, BwdAtomicCfg<D>, kDqAtomic, kBf16, kCausal>(p);
    emu::Launch({static_cast<unsigned>((p.seq_q + kPreRows<D> - 1) / kPreRows<D>), static_cast<unsigned>(p.heads),
                 static_cast<unsigned>(p.batch)},
                256, [&] { BwdConvertDqKernel<D, kBf16>(p); });
    return;
  }
  emu::Launch({static_cast<unsigned>((p.seq_q + kPreRows<D> - 1) / kPreRows<D>), static_cast<unsigned>(p.heads),
               static_cast<unsigned>(p.batch)},
              256, [&] { BwdPreprocessKernel<D, kBf16, false>(p); });
  if (IsDsVariant(bv)) {  // the dK/dV pass on wgmma (as on compute capability 9.0) or mma.sync
    if (bv == kBwdDsVariant) {
      DkDv<D, BwdDsCfg, kDqStoreDs, kBf16, kCausal>(p);
    } else if (IsWsBwdVariant(bv)) {
      if (bv == kBwdWsDs1Variant) BackwardWs<D, 1, kBf16, kCausal>(p);
      else BackwardWs<D, 2, kBf16, kCausal>(p);
    } else {  // the wgmma pass
      const int nwg = bv == kBwdWgmmaDs1Variant ? 1 : 2;
      emu::Launch({static_cast<unsigned>((p.seq_k + 64 * nwg - 1) / (64 * nwg)), static_cast<unsigned>(p.kv_heads),
                   static_cast<unsigned>(p.batch)},
                  128 * nwg, [&] {
                    if (nwg == 1) FlashBwdWgmmaKernel<D, 1, kBf16, kCausal>(p);
                    else FlashBwdWgmmaKernel<D, 2, kBf16, kCausal>(p);
                  });
    }
    constexpr int BM = 32 * kDqFromDsWarps;
    emu::Launch({static_cast<unsigned>((p.seq_q + BM - 1) / BM), static_cast<unsigned>(p.heads),
                 static_cast<unsigned>(p.batch)},
                32 * kDqFromDsWarps, [&] { FlashBwdDqFromDsKernel<D, kDqFromDsWarps, kBf16, kCausal>(p); });
    return;
  }
  bool found = false;
  switch (bv) {
#define LOOM_BWD_CASE(id, nw, bm, mb)                            \
  case id:                                                       \
    DkDv<D, BwdCfg<nw, bm, mb>, kDqSeparate, kBf16, kCausal>(p); \
    found = true;                                                \
    break;
    LOOM_BWD_VARIANTS(LOOM_BWD_CASE)
#undef LOOM_BWD_CASE
  }
  ASSERT_TRUE(found) << "no backward variant " << bv;
  switch (p.dq_variant > 0 ? p.dq_variant : DqDefaultVariant(D)) {
#define LOOM_DQ_CASE(id, nw, bn, mb) \
  case id:                           \
    return Dq<D, DqCfg<nw, bn, mb>, kBf16, kCausal>(p);
    LOOM_DQ_VARIANTS(LOOM_DQ_CASE)
#undef LOOM_DQ_CASE
  }
  FAIL() << "no dq variant " << p.dq_variant;
}
template <int D, bool kBf16>
void RunAll(const FlashParams& p) {
  if (p.causal) {
    Forward<D, kBf16, true>(p);
    Backward<D, kBf16, true>(p);
  } else {
    Forward<D, kBf16, false>(p);
    Backward<D, kBf16, false>(p);
  }
}

uint16_t Round(double v, bool bf16) {
  return bf16 ? __float2bfloat16_rn(static_cast<float>(v)).x : __float2half_rn(static_cast<float>(v)).x;
}
double Value(uint16_t h, bool bf16) { return bf16 ? __bfloat162float({h}) : __half2float({h}); }

double RelErr(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);
}

class Emulated : public ::testing::TestWithParam<Case> {};

TEST_P(Emulated, MatchesFp64Reference) {
  const Case c = GetParam();
  const size_t nq = static_cast<size_t>(c.b) * c.h * c.tq * c.d, nk = static_cast<size_t>(c.b) * c.hkv * c.tk * c.d;
  uint64_t seed = 12345;
  auto rnd = [&] {  // approximately normal
    double acc = 0;
    for (int j = 0; j < 4; ++j) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      acc += static_cast<double>(seed >> 11) / 9007199254740992.0 - 0.5;
    }
    return acc * 1.7320508;
  };
  auto make = [&](size_t n, std::vector<uint16_t>* h, std::vector<double>* v) {
    h->resize(n);
    v->resize(n);
    for (size_t i = 0; i < n; ++i) {
      (*h)[i] = Round(rnd(), c.bf16);
      (*v)[i] = Value((*h)[i], c.bf16);
    }
  };
  std::vector<uint16_t> hq, hk, hv, hdo;
  std::vector<double> q, k, v, dout;
  make(nq, &hq, &q);
  make(nk, &hk, &k);
  make(nk, &hv, &v);
  make(nq, &hdo, &dout);
  std::vector<uint16_t> o(nq, 0xFFFF), dq(nq, 0xFFFF), dk(nk, 0xFFFF), dv(nk, 0xFFFF);
  const size_t rows = static_cast<size_t>(c.b) * c.h * c.tq;
  std::vector<float> lse(rows, NAN), ws(rows * (c.d + 1), NAN);
  FlashParams p;
  // Strided layouts: the tensors live in qkv / dqkv / o_s / do_s; gathered back after.
  const int64_t hd = static_cast<int64_t>(c.h) * c.d;
  const TensorStrides s3{c.tq * 3 * hd, c.d, 3 * hd}, s1{c.tq * hd, c.d, hd};
  std::vector<uint16_t> qkv, dqkv, o_s, do_s;
  auto at = [&](const TensorStrides& st, size_t i) {  // contiguous index -> strided offset
    const size_t dd = i % c.d, t = i / c.d % c.tq, h = i / c.d / c.tq % c.h, b = i / c.d / c.tq / c.h;
    return b * st.b + h * st.h + t * st.r + dd;
  };
  if (c.strided) {
    ASSERT_TRUE(c.h == c.hkv && c.tq == c.tk);
    qkv.assign(nq * 3, 0xFFFF), dqkv.assign(nq * 3, 0xFFFF), o_s.assign(nq, 0xFFFF), do_s.assign(nq, 0xFFFF);
    for (size_t i = 0; i < nq; ++i) {
      qkv[at(s3, i)] = hq[i], qkv[at(s3, i) + hd] = hk[i], qkv[at(s3, i) + 2 * hd] = hv[i];
      do_s[at(s1, i)] = hdo[i];
    }
    p.sq = p.sk = p.sv = p.sdq = p.sdk = p.sdv = s3;
    p.so = p.sdo = s1;
  }
  p.bf16 = c.bf16;
  p.batch = c.b, p.heads = c.h, p.kv_heads = c.hkv, p.seq_q = c.tq, p.seq_k = c.tk, p.head_dim = c.d;
  p.causal = c.causal;
  p.fwd_variant = c.fwd_variant, p.bwd_variant = c.bwd_variant, p.dq_variant = c.dq_variant;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  p.q = hq.data(), p.k = hk.data(), p.v = hv.data(), p.o = o.data(), p.lse = lse.data();
  p.dout = hdo.data(), p.dq = dq.data(), p.dk = dk.data(), p.dv = dv.data();
  p.dq_accum = ws.data(), p.delta = ws.data() + rows * c.d;
  // The stored-dS variant's dS^T, poisoned (NaN): a tile read but never written shows.
  std::vector<uint16_t> ds(static_cast<size_t>(c.b) * c.h * DsKeys(c.tk) * DsQueries(c.tq), 0xFFFF);
  p.ds = ds.data(), p.ds_keys = static_cast<int>(DsKeys(c.tk)), p.ds_ld = DsQueries(c.tq);
  p.ds_bh = p.ds_keys * p.ds_ld;
  if (c.strided) {
    p.q = qkv.data(), p.k = qkv.data() + hd, p.v = qkv.data() + 2 * hd, p.o = o_s.data(), p.dout = do_s.data();
    p.dq = dqkv.data(), p.dk = dqkv.data() + hd, p.dv = dqkv.data() + 2 * hd;
  }
  ref::SdpaShape s;
  s.batch = c.b, s.heads = c.h, s.kv_heads = c.hkv, s.seq_q = c.tq, s.seq_k = c.tk, s.head_dim = c.d;
  s.causal = c.causal;
  s.scale = p.scale;
  std::vector<double> ro, rlse, rdq, rdk, rdv;
  ref::SdpaForward(s, q, k, v, &ro, &rlse);
  ref::SdpaBackward(s, q, k, v, dout, &rdq, &rdk, &rdv);
  ResolveDefaultStrides(&p);
  // Every schedule of the emulator's fibers: warpgroups side by side, each
  // one running ahead of the others in turn, and the highest one held up
  // after each of its arrivals. Outputs poisoned before each.
  for (emu::Schedule order :
       {emu::Schedule::kLockstep, emu::Schedule::kSkewUp, emu::Schedule::kSkewDown, emu::Schedule::kSkewUpPark}) {
    SCOPED_TRACE(static_cast<int>(order));
    emu::S().schedule = order;
    for (auto* x : {&o, &dq, &dk, &dv, &ds}) std::fill(x->begin(), x->end(), uint16_t{0xFFFF});
    for (auto* x : {&dqkv, &o_s}) std::fill(x->begin(), x->end(), uint16_t{0xFFFF});  // strided outputs
    std::fill(lse.begin(), lse.end(), NAN);
    std::fill(ws.begin(), ws.end(), NAN);
    if (c.d == 64) c.bf16 ? RunAll<64, true>(p) : RunAll<64, false>(p);
    else c.bf16 ? RunAll<128, true>(p) : RunAll<128, false>(p);
    if (c.strided) {
      for (size_t i = 0; i < nq; ++i) {
        o[i] = o_s[at(s1, i)];
        dq[i] = dqkv[at(s3, i)], dk[i] = dqkv[at(s3, i) + hd], dv[i] = dqkv[at(s3, i) + 2 * hd];
      }
    }
    auto vals = [&](const std::vector<uint16_t>& x) {
      std::vector<double> r(x.size());
      for (size_t i = 0; i < x.size(); ++i) r[i] = Value(x[i], c.bf16);
      return r;
    };
    const double eo = RelErr(vals(o), ro), el = RelErr(std::vector<double>(lse.begin(), lse.end()), rlse),
                 eq = RelErr(vals(dq), rdq), ek = RelErr(vals(dk), rdk), ev = RelErr(vals(dv), rdv);
    std::printf("schedule %d %s D%d B%d H%d/%d T%d/%d causal=%d variants fwd %d bwd %d dq %d: o %.2e lse %.2e "
                "dq %.2e dk %.2e dv %.2e\n",
                static_cast<int>(order), c.bf16 ? "bf16" : "f16", c.d, c.b, c.h, c.hkv, c.tq, c.tk, c.causal, c.fwd_variant, c.bwd_variant,
                c.dq_variant, eo, el, eq, ek, ev);
    EXPECT_LT(eo, 1e-2);
    EXPECT_LT(el, 1e-3);
    EXPECT_LT(eq, 1e-2);
    EXPECT_LT(ek, 1e-2);
    EXPECT_LT(ev, 1e-2);
  }
  emu::S().schedule = emu::Schedule::kLockstep;
}

// An inference forward (lse null) writes the same o, bit for bit, as the
// forward that keeps lse, and nothing where lse would go: every forward
// variant, D 64 and 128, causal and not, GQA, ragged ends.
template <int D, bool kCausal>
void CheckInferenceForward(int variant) {
  const int b = 1, h = 2, hkv = 1, tq = 150, tk = 140;
  const size_t nq = static_cast<size_t>(b) * h * tq * D, nk = static_cast<size_t>(b) * hkv * tk * D;
  std::vector<uint16_t> q(nq), k(nk), v(nk);
  uint64_t seed = 99;
  for (auto* x : {&q, &k, &v})
    for (uint16_t& e : *x) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      e = Round(static_cast<double>(seed >> 11) / 9007199254740992.0 * 4 - 2, true);
    }
  FlashParams p;
  p.bf16 = 1, p.batch = b, p.heads = h, p.kv_heads = hkv, p.seq_q = tq, p.seq_k = tk, p.head_dim = D;
  p.causal = kCausal;
  p.fwd_variant = variant;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  p.q = q.data(), p.k = k.data(), p.v = v.data();
  ResolveDefaultStrides(&p);
  std::vector<uint16_t> o_train(nq, 0xFFFF), o_inf(nq, 0xFFFF);
  std::vector<float> lse(static_cast<size_t>(b) * h * tq, NAN);
  p.o = o_train.data(), p.lse = lse.data();
  Forward<D, true, kCausal>(p);
  for (float x : lse) ASSERT_TRUE(std::isfinite(x)) << "variant " << variant << ": the training forward wrote lse";
  p.o = o_inf.data(), p.lse = nullptr;
  Forward<D, true, kCausal>(p);
  for (size_t i = 0; i < nq; ++i)
    ASSERT_EQ(o_inf[i], o_train[i]) << "variant " << variant << " D" << D << " causal " << kCausal << " element " << i;
}

TEST(EmulatedInference, EveryForwardVariantWritesTheSameOWithoutLse) {
  for (int v = 1; v <= kFwdVariants; ++v) {
    CheckInferenceForward<64, true>(v);
    CheckInferenceForward<128, false>(v);
  }
}

// delta = rowsum(dO * O) from BwdPreprocessKernel, against fp64: 16-byte
// loads where the operands allow them, element loads where they are
// misaligned (o and dout one element off) or their row stride is not a whole
// number of 8-element chunks; Tq not a multiple of the block's rows.
template <int D, bool kBf16>
void CheckPreprocess(int64_t offset, int64_t row_stride) {
  const int b = 2, h = 3, tq = 45;
  const int64_t n = static_cast<int64_t>(b) * h * tq * row_stride + offset;
  std::vector<uint16_t> o(n + 8), dout(n + 8);
  uint64_t seed = 7;
  for (int64_t i = 0; i < n + 8; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    o[i] = Round(static_cast<double>(seed >> 11) / 9007199254740992.0 - 0.5, kBf16);
    dout[i] = Round(static_cast<double>(seed >> 20) / 17592186044416.0 - 0.5, kBf16);
  }
  std::vector<float> delta(static_cast<size_t>(b) * h * tq, NAN);
  FlashParams p;
  p.bf16 = kBf16, p.batch = b, p.heads = h, p.kv_heads = h, p.seq_q = tq, p.seq_k = tq, p.head_dim = D;
  p.o = o.data() + offset, p.dout = dout.data() + offset, p.delta = delta.data();
  p.so = p.sdo = TensorStrides{h * tq * row_stride, tq * row_stride, row_stride};
  emu::Launch({static_cast<unsigned>((tq + kPreRows<D> - 1) / kPreRows<D>), static_cast<unsigned>(h),
               static_cast<unsigned>(b)},
              256, [&] { BwdPreprocessKernel<D, kBf16, false>(p); });
  for (int bb = 0; bb < b; ++bb)
    for (int hh = 0; hh < h; ++hh)
      for (int t = 0; t < tq; ++t) {
        const int64_t base = offset + bb * p.so.b + hh * p.so.h + t * row_stride;
        double ref = 0;
        for (int i = 0; i < D; ++i) ref += Value(o[base + i], kBf16) * Value(dout[base + i], kBf16);
        const float got = delta[(static_cast<size_t>(bb) * h + hh) * tq + t];
        ASSERT_NEAR(got, ref, 1e-5 * (1 + std::fabs(ref))) << "D" << D << " offset " << offset << " stride "
                                                           << row_stride << " b" << bb << " h" << hh << " t" << t;
      }
}

TEST(EmulatedPreprocess, DeltaMatchesFp64WithAndWithoutVectorLoads) {
  CheckPreprocess<64, true>(0, 64);     // contiguous: 16-byte loads
  CheckPreprocess<64, true>(1, 64);     // misaligned base: element loads
  CheckPreprocess<128, false>(0, 136);  // padded rows, still whole chunks
  CheckPreprocess<128, true>(0, 130);   // row stride not a multiple of 8: element loads
}

// dQ = scale * accumulator from BwdConvertDqKernel, against fp64 rounded
// once: one 16-byte store a lane where dq allows it, element stores where dq
// is misaligned or its row stride is not a whole number of 8-element chunks;
// Tq not a multiple of the block's rows. Padding around each row stays as
// written (0xFFFF), so a store past a row's D elements shows.
template <int D, bool kBf16>
void CheckConvert(int64_t offset, int64_t row_stride) {
  const int b = 2, h = 3, tq = 45;
  const size_t rows = static_cast<size_t>(b) * h * tq;
  std::vector<float> acc(rows * D);
  uint64_t seed = 11;
  for (float& x : acc) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(seed >> 11) / 9007199254740992.0 - 0.5) * 8.f;
  }
  std::vector<uint16_t> dq(rows * row_stride + offset + 8, 0xFFFF);
  FlashParams p;
  p.bf16 = kBf16, p.batch = b, p.heads = h, p.kv_heads = h, p.seq_q = tq, p.seq_k = tq, p.head_dim = D;
  p.scale = 0.125f;
  p.dq_accum = acc.data(), p.dq = dq.data() + offset;
  p.sdq = TensorStrides{h * tq * row_stride, tq * row_stride, row_stride};
  emu::Launch({static_cast<unsigned>((tq + kPreRows<D> - 1) / kPreRows<D>), static_cast<unsigned>(h),
               static_cast<unsigned>(b)},
              256, [&] { BwdConvertDqKernel<D, kBf16>(p); });
  for (size_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < row_stride; ++i) {
      const uint16_t got = dq[offset + r * row_stride + i];
      const uint16_t want = i < D ? Round(static_cast<double>(acc[r * D + i] * p.scale), kBf16) : uint16_t{0xFFFF};
      ASSERT_EQ(got, want) << "D" << D << " offset " << offset << " stride " << row_stride << " row " << r << " col "
                           << i;
    }
}

TEST(EmulatedConvert, DqMatchesScaledAccumulatorWithAndWithoutVectorStores) {
  CheckConvert<64, true>(0, 64);     // contiguous: 16-byte stores
  CheckConvert<128, false>(0, 136);  // padded rows, still whole chunks
  CheckConvert<64, true>(1, 72);     // misaligned base: element stores
  CheckConvert<128, true>(0, 130);   // row stride not a multiple of 8: element stores
}

INSTANTIATE_TEST_SUITE_P(Shapes, Emulated,
                         ::testing::Values(Case{true, 1, 2, 1, 150, 150, 64, true},
                                           Case{true, 1, 1, 1, 100, 130, 128, false},
                                           Case{true, 1, 2, 1, 100, 70, 128, true},
                                           Case{false, 1, 1, 1, 80, 80, 64, false},
                                           Case{true, 1, 2, 1, 200, 200, 128, true},
                                           Case{false, 1, 2, 2, 100, 100, 128, true},
                                           Case{true, 2, 2, 2, 17, 17, 64, false},
                                           Case{true, 1, 3, 1, 70, 150, 64, true},
                                           // Every other compiled variant, once each.
                                           Case{true, 1, 2, 1, 130, 100, 128, true, 2, 6, 2},
                                           Case{false, 1, 1, 1, 70, 150, 64, false, 3, 3, 3},
                                           Case{true, 1, 2, 1, 150, 150, 64, true, 4, 4, 4},
                                           Case{true, 1, 1, 1, 90, 90, 128, true, 5, 5, 2},
                                           Case{true, 1, 2, 1, 140, 140, 64, true, 1, 6, 1},
                                           Case{true, 1, 1, 1, 100, 160, 128, false, 1, 2, 4},
                                           Case{true, 1, 2, 1, 150, 140, 128, true, 6, 0, 0},
                                           Case{false, 1, 1, 1, 90, 200, 64, false, 7, 0, 0},
                                           Case{true, 1, 1, 1, 270, 270, 64, true, 6, 0, 0},
                                           // Stored dS: causal and not, GQA, Tq != Tk, ragged ends.
                                           Case{true, 1, 2, 1, 150, 290, 128, false, 0, 7, 0},
                                           Case{true, 1, 2, 1, 270, 200, 64, true, 0, 7, 0},
                                           Case{false, 2, 2, 2, 200, 270, 128, true, 0, 7, 0},
                                           Case{true, 1, 1, 1, 90, 90, 64, false, 0, 7, 0, true},
                                           // Atomic dQ over several key blocks (rotated query-tile order), GQA.
                                           Case{true, 1, 2, 1, 150, 290, 128, false, 0, 6, 0},
                                           Case{false, 1, 2, 1, 270, 270, 64, true, 0, 6, 0},
                                           // The wgmma kernels (the defaults above): each schedule and
                                           // block size, forward and dK/dV, GQA, causal, Tq != Tk.
                                           Case{true, 1, 2, 1, 150, 290, 128, false, 8, 8, 0},
                                           Case{false, 1, 2, 2, 200, 200, 64, true, 8, 9, 0},
                                           Case{true, 1, 2, 1, 270, 200, 64, true, 9, 8, 0},
                                           Case{true, 2, 2, 2, 130, 130, 128, true, 10, 9, 0},
                                           Case{false, 1, 3, 1, 100, 170, 128, false, 9, 9, 0},
                                           // The warp-specialised forward (TMA): both block sizes,
                                           // one and several key tiles (ring stages reused), GQA,
                                           // causal, Tq != Tk, ragged ends, strided views.
                                           Case{true, 1, 2, 1, 150, 290, 128, false, 11, 0, 0},
                                           Case{false, 1, 2, 2, 200, 200, 64, true, 11, 0, 0},
                                           Case{true, 1, 2, 1, 270, 530, 64, true, 12, 0, 0},
                                           Case{true, 2, 2, 2, 130, 100, 128, true, 12, 0, 0},
                                           Case{false, 1, 3, 1, 100, 520, 64, false, 12, 0, 0},
                                           Case{true, 1, 2, 2, 90, 90, 128, true, 11, 0, 0, true},
                                           Case{true, 1, 2, 1, 152, 300, 64, true, 13, 10, 0},
                                           Case{false, 1, 2, 2, 132, 400, 64, false, 13, 11, 0, false},
                                           // Three stages: the ring wraps at another period.
                                           Case{true, 1, 2, 1, 300, 700, 64, false, 14, 0, 0},
                                           Case{false, 1, 2, 2, 530, 530, 128, true, 14, 0, 0},
                                           // The warp-specialised dK/dV pass: both block sizes, GQA
                                           // (several query heads a block), causal, Tq != Tk both
                                           // ways, ragged ends, D 64 and 128, strided views.
                                           // Tq not a multiple of 64, nor of 4 (each head's lse and
                                           // delta rows start at another offset in their boxes).
                                           Case{true, 1, 2, 1, 152, 290, 128, false, 11, 10, 0},
                                           Case{true, 1, 4, 2, 268, 200, 64, true, 0, 11, 0},
                                           Case{false, 2, 2, 2, 200, 330, 128, true, 0, 11, 0},
                                           Case{true, 1, 3, 1, 132, 130, 64, false, 0, 10, 0},
                                           Case{true, 1, 2, 2, 92, 92, 128, true, 0, 10, 0, true},
                                           Case{true, 1, 2, 1, 150, 290, 128, false, 0, 11, 0},
                                           Case{true, 1, 4, 2, 333, 200, 128, true, 0, 11, 0},
                                           Case{false, 2, 4, 4, 151, 151, 64, false, 0, 10, 0},
                                           // The one-pass warp-specialised backward (dQ by tensor
                                           // reduces): D 64 and 128, GQA, causal, Tq != Tk both
                                           // ways, ragged ends, several key blocks and query
                                           // tiles (both dS buffers reused), strided views.
                                           Case{true, 1, 2, 1, 152, 290, 128, false, 11, 12, 0},
                                           Case{true, 1, 4, 2, 268, 200, 64, true, 0, 12, 0},
                                           Case{false, 2, 2, 2, 200, 332, 128, true, 0, 12, 0},
                                           Case{true, 1, 3, 1, 132, 132, 64, false, 0, 12, 0},
                                           Case{true, 1, 2, 2, 92, 92, 128, true, 0, 12, 0, true},
                                           Case{true, 1, 2, 1, 90, 130, 64, true, 0, 12, 0},
                                           Case{false, 2, 4, 4, 151, 151, 128, false, 0, 12, 0},
                                           Case{true, 1, 4, 2, 333, 200, 64, true, 0, 12, 0},
                                           // Strided views ([B, T, 3, H, D] qkv, [B, T, H, D] o/dout).
                                           Case{true, 2, 2, 2, 70, 70, 64, true, 0, 0, 0, true},
                                           Case{true, 1, 2, 2, 90, 90, 128, false, 0, 6, 0, true},
                                           Case{true, 1, 2, 2, 92, 92, 64, true, 10, 9, 0, true}));

}  // namespace
}  // namespace loom::kernels::cuda::attention
