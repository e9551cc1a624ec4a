// Flash attention on the CPU (FlashAttention-2 style).
//
// Forward: ParallelFor over (b, h, query block of kBr rows). Each task keeps its
// output block, running max m and running sum l, and walks key blocks of kBc
// columns: S = (scale q) K^T by the tile GEMM, online softmax update, O += P V.
// Only kBr x kBc scores exist at a time. Causal stops at the diagonal block.
//
// Backward: the saved lse gives P = exp(S - lse) tile by tile; D_t = rowsum(dO*O);
// dS = P * (dP - D). Tasks are (b, kv head, key block): each owns dK, dV of its
// key block (summed over the G query heads of the group) and adds dQ into a
// per-worker-part accumulator; parts are summed in a fixed order at the end, so
// results do not depend on scheduling. Causal skips query blocks above the
// diagonal.
//
// Packed operands (zero padded so GEMM tiles need no edge cases): K^T blocked as
// [Sp/kBc][D][kBc], V [Sp, Dvp], and in the backward also q*scale [Tp, Dp],
// dO [Tp, Dvp], K [Sp, Dp], V^T blocked as [Sp/kBc][Dv][kBc]; plus one dQ
// accumulator per worker part (NumThreads() parts). Memory is O((T + S) * D),
// linear in the sequence length.
//
// Tiles are 64 x 64 (16 KiB of f32 scores: the S tile, the K^T panel and the
// q block fit in L1 together); the tile GEMM is sdpa_internal.h's GemmAcc.
#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/sdpa/sdpa_internal.h"

namespace loom::kernels::sdpa::internal {

namespace {

constexpr int64_t kBr = 64;  // query rows per tile
constexpr int64_t kBc = 64;  // key columns per tile

struct Dims {
  int64_t B, H, Hkv, G, T, S, D, Dv, Dp, Dvp, Tp, Sp, nqb, nkb;
  explicit Dims(const SdpaParams& p)
      : B(p.B), H(p.H), Hkv(p.Hkv), G(p.group()), T(p.T), S(p.S), D(p.D), Dv(p.Dv),
        Dp(RoundUp(p.D, 16)), Dvp(RoundUp(p.Dv, 16)), Tp(RoundUp(p.T, kBr)), Sp(RoundUp(p.S, kBc)),
        nqb((p.T + kBr - 1) / kBr), nkb((p.S + kBc - 1) / kBc) {}
};

// Number of valid key columns of row t in the key block starting at j0 (kn keys).
inline int64_t ValidCols(bool causal, int64_t t, int64_t j0, int64_t kn) {
  return causal ? std::min(kn, t - j0 + 1) : kn;
}

}  // namespace

template <typename T>
void FlashForward(const FwdArgs<T>& a) {
  const SdpaParams& p = *a.p;
  const Dims d(p);
  const T scale = static_cast<T>(p.scale);
  const float drop = static_cast<float>(p.dropout_p);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const T ninf = -std::numeric_limits<T>::infinity();
  const Philox rng(p.seed, 0);

  Scratch<T> kt(d.B * d.Hkv * d.D * d.Sp), vp(d.B * d.Hkv * d.Sp * d.Dvp);
  PackTransposedBlocked<T>(a.k, d.B * d.Hkv, d.S, d.D, kt.data(), kBc);
  PackRows<T>(a.v, d.B * d.Hkv, d.S, d.Dv, vp.data(), d.Sp, d.Dvp, T(1));

  ParallelFor(d.B * d.H * d.nqb, 1, [&](int64_t lo, int64_t hi) {
    Scratch<T> qt(kBr * d.Dp), sb(kBr * kBc), oacc(kBr * d.Dvp), mult(kBc);
    std::vector<T> m(kBr), l(kBr);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t bh = task / d.nqb, qb = task % d.nqb;
      const int64_t b = bh / d.H, h = bh % d.H, bk = b * d.Hkv + h / d.G;
      const int64_t i0 = qb * kBr, nr = std::min(kBr, d.T - i0), mr = RoundUp(nr, 4);
      qt.Zero();
      for (int64_t r = 0; r < nr; ++r) {
        const T* src = a.q + (bh * d.T + i0 + r) * d.D;
        T* dst = qt.data() + r * d.Dp;
        for (int64_t c = 0; c < d.D; ++c) dst[c] = src[c] * scale;
      }
      oacc.Zero();
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), T(0));
      const T* ktb = kt.data() + bk * d.D * d.Sp;  // [nkb][D][kBc]
      const T* vpb = vp.data() + bk * d.Sp * d.Dvp;
      const int64_t jend = p.is_causal ? std::min(d.S, i0 + nr) : d.S;
      for (int64_t j0 = 0; j0 < jend; j0 += kBc) {
        const int64_t kn = std::min(kBc, d.S - j0);
        T* s = sb.data();
        GemmSet<T>(mr, kBc, d.D, qt.data(), d.Dp, 1, ktb + j0 * d.D, kBc, s, kBc);
        for (int64_t r = 0; r < mr; ++r) {
          T* row = s + r * kBc;
          const int64_t t = i0 + r;
          const int64_t nc = r < nr ? ValidCols(p.is_causal, t, j0, kn) : 0;
          if (nc <= 0) {
            std::memset(row, 0, sizeof(T) * kBc);
            continue;
          }
          const T mx = RowMax<T>(row, nc);
          const T mnew = std::max(m[r], mx);
          const T alpha = m[r] == ninf ? T(0) : std::exp(m[r] - mnew);
          const T sum = ExpSubSum<T>(row, nc, mnew);
          for (int64_t c = nc; c < kBc; ++c) row[c] = 0;
          l[r] = l[r] * alpha + sum;
          m[r] = mnew;
          if (alpha != T(1)) {
            T* o = oacc.data() + r * d.Dvp;
            for (int64_t c = 0; c < d.Dvp; ++c) o[c] *= alpha;
          }
          if (drop > 0) {
            DropoutMultipliers<T>(rng, static_cast<uint64_t>((bh * d.T + t) * d.S + j0), nc, drop, keep_scale,
                                  mult.data());
            for (int64_t c = 0; c < nc; ++c) row[c] *= mult.data()[c];
          }
        }
        GemmAcc<T>(mr, d.Dvp, kn, s, kBc, 1, vpb + j0 * d.Dvp, d.Dvp, oacc.data(), d.Dvp);
      }
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t t = i0 + r;
        T* out = a.out + (bh * d.T + t) * d.Dv;
        const T* o = oacc.data() + r * d.Dvp;
        if (l[r] == T(0)) {
          std::fill(out, out + d.Dv, T(0));
          a.lse[bh * d.T + t] = ninf;
          continue;
        }
        const T inv = T(1) / l[r];
        for (int64_t c = 0; c < d.Dv; ++c) out[c] = o[c] * inv;
        a.lse[bh * d.T + t] = m[r] + std::log(l[r]);
      }
    }
  });
}

namespace {

// The backward's packed operands (see the top of the file) and D_t = rowsum(dO * O)
// per query row, [B*H][Tp].
template <typename T>
struct BwdOperands {
  Scratch<T> qs, dop, kp, kt, vt, di;

  BwdOperands(const BwdArgs<T>& a, const Dims& d, T scale)
      : qs(d.B * d.H * d.Tp * d.Dp),
        dop(d.B * d.H * d.Tp * d.Dvp),
        kp(d.B * d.Hkv * d.Sp * d.Dp),
        kt(d.B * d.Hkv * d.D * d.Sp),
        vt(d.B * d.Hkv * d.Dv * d.Sp),
        di(d.B * d.H * d.Tp) {
    const int64_t BH = d.B * d.H, BK = d.B * d.Hkv;
    PackRows<T>(a.q, BH, d.T, d.D, qs.data(), d.Tp, d.Dp, scale);
    PackRows<T>(a.dout, BH, d.T, d.Dv, dop.data(), d.Tp, d.Dvp, T(1));
    PackRows<T>(a.k, BK, d.S, d.D, kp.data(), d.Sp, d.Dp, T(1));
    PackTransposedBlocked<T>(a.k, BK, d.S, d.D, kt.data(), kBc);
    PackTransposedBlocked<T>(a.v, BK, d.S, d.Dv, vt.data(), kBc);
    ParallelFor(BH * d.T, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* go = a.dout + i * d.Dv;
        const T* o = a.out + i * d.Dv;
        T acc = 0;
        for (int64_t c = 0; c < d.Dv; ++c) acc += go[c] * o[c];
        di.data()[(i / d.T) * d.Tp + i % d.T] = acc;
      }
    });
  }
};

// One worker's tiles: scores / P, P with dropout, dP / dS, dropout
// multipliers, and the dK, dV accumulators of the key block in hand.
template <typename T>
struct BwdTiles {
  Scratch<T> sb, pd, dpb, mult, dkacc, dvacc;
  explicit BwdTiles(const Dims& d)
      : sb(kBr * kBc), pd(kBr * kBc), dpb(kBr * kBc), mult(kBr * kBc), dkacc(kBc * d.Dp), dvacc(kBc * d.Dvp) {}
};

// What every backward task reads.
template <typename T>
struct BwdContext {
  const BwdArgs<T>& a;
  const Dims& d;
  const BwdOperands<T>& packed;
  const Philox& rng;
  float drop;
  T keep_scale;
};

// One key block of one kv head: its panels in the packed operands.
template <typename T>
struct KeyBlock {
  int64_t bk, j0, kn;
  const T* ktj;  // K^T [D][kBc] panel
  const T* vtj;  // V^T [Dv][kBc] panel
  const T* kpj;  // K rows [kBc][Dp]
};

// The tile of query block `ib` of head `bh` against key block `kb`: adds its
// share to dV and dK (tiles) and to dQ (dqp, unscaled).
template <typename T>
void BwdTile(const BwdContext<T>& cx, BwdTiles<T>& tl, const KeyBlock<T>& kb, int64_t bh, int64_t ib, T* dqp) {
  const Dims& d = cx.d;
  const T ninf = -std::numeric_limits<T>::infinity();
  const int64_t j0 = kb.j0, kn = kb.kn;
  const int64_t i0 = ib * kBr, nr = std::min(kBr, d.T - i0), mr = RoundUp(nr, 4);
  const T* qi = cx.packed.qs.data() + (bh * d.Tp + i0) * d.Dp;
  const T* doi = cx.packed.dop.data() + (bh * d.Tp + i0) * d.Dvp;
  const T* lse = cx.a.lse + bh * d.T + i0;
  const T* dii = cx.packed.di.data() + bh * d.Tp + i0;
  T* s = tl.sb.data();
  GemmSet<T>(mr, kBc, d.D, qi, d.Dp, 1, kb.ktj, kBc, s, kBc);
  bool any = false;
  for (int64_t r = 0; r < mr; ++r) {
    T* row = s + r * kBc;
    const int64_t nc = r < nr ? ValidCols(cx.a.p->is_causal, i0 + r, j0, kn) : 0;
    if (nc <= 0 || lse[r] == ninf) {
      std::memset(row, 0, sizeof(T) * kBc);
      continue;
    }
    any = true;
    ExpSub<T>(row, nc, lse[r]);
    for (int64_t c = nc; c < kBc; ++c) row[c] = 0;
  }
  if (!any) return;
  // Pd = P * dropout multipliers.
  const T* pdrop = s;
  if (cx.drop > 0) {
    for (int64_t r = 0; r < nr; ++r) {
      T* mrow = tl.mult.data() + r * kBc;
      std::fill(mrow, mrow + kBc, T(0));
      DropoutMultipliers<T>(cx.rng, static_cast<uint64_t>((bh * d.T + i0 + r) * d.S + j0), kn, cx.drop,
                            cx.keep_scale, mrow);
      const T* prow = s + r * kBc;
      T* dst = tl.pd.data() + r * kBc;
      for (int64_t c = 0; c < kBc; ++c) dst[c] = prow[c] * mrow[c];
    }
    pdrop = tl.pd.data();
  }
  // dV += Pd^T dO.
  GemmAcc<T>(kBc, d.Dvp, nr, pdrop, 1, kBc, doi, d.Dvp, tl.dvacc.data(), d.Dvp);
  // dP = dO V^T (w.r.t. the dropped P), then dS = P * (dP * mult - D).
  T* dp = tl.dpb.data();
  GemmSet<T>(mr, kBc, d.Dv, doi, d.Dvp, 1, kb.vtj, kBc, dp, kBc);
  for (int64_t r = 0; r < mr; ++r) {
    T* dprow = dp + r * kBc;
    const T* prow = s + r * kBc;
    if (r >= nr) {
      std::memset(dprow, 0, sizeof(T) * kBc);
      continue;
    }
    const T dr = dii[r];
    if (cx.drop > 0) {
      const T* mrow = tl.mult.data() + r * kBc;
      for (int64_t c = 0; c < kBc; ++c) dprow[c] = prow[c] * (dprow[c] * mrow[c] - dr);
    } else {
      for (int64_t c = 0; c < kBc; ++c) dprow[c] = prow[c] * (dprow[c] - dr);
    }
  }
  // dK += dS^T (q*scale);  dQ += dS K (scaled at the end).
  GemmAcc<T>(kBc, d.Dp, nr, dp, 1, kBc, qi, d.Dp, tl.dkacc.data(), d.Dp);
  GemmAcc<T>(mr, d.Dp, kn, dp, kBc, 1, kb.kpj, d.Dp, dqp + (bh * d.Tp + i0) * d.Dp, d.Dp);
}

// Task (b, kv head, key block): dK and dV of the key block, summed over the
// G query heads of the group and the query blocks (from the diagonal when
// causal), written to a.dk / a.dv; dQ shares go to dqp.
template <typename T>
void BwdKeyBlock(const BwdContext<T>& cx, BwdTiles<T>& tl, int64_t task, T* dqp) {
  const Dims& d = cx.d;
  const int64_t bk = task / d.nkb, jb = task % d.nkb;
  const int64_t b = bk / d.Hkv, hk = bk % d.Hkv;
  const int64_t j0 = jb * kBc, kn = std::min(kBc, d.S - j0);
  const KeyBlock<T> kb{bk,
                       j0,
                       kn,
                       cx.packed.kt.data() + bk * d.D * d.Sp + j0 * d.D,
                       cx.packed.vt.data() + bk * d.Dv * d.Sp + j0 * d.Dv,
                       cx.packed.kp.data() + (bk * d.Sp + j0) * d.Dp};
  tl.dkacc.Zero();
  tl.dvacc.Zero();
  for (int64_t h = hk * d.G; h < (hk + 1) * d.G; ++h) {
    const int64_t bh = b * d.H + h;
    const int64_t ib0 = cx.a.p->is_causal ? j0 / kBr : 0;
    for (int64_t ib = ib0; ib < d.nqb; ++ib) BwdTile(cx, tl, kb, bh, ib, dqp);
  }
  for (int64_t c = 0; c < kn; ++c) {
    T* dk = cx.a.dk + (bk * d.S + j0 + c) * d.D;
    T* dv = cx.a.dv + (bk * d.S + j0 + c) * d.Dv;
    const T* sk = tl.dkacc.data() + c * d.Dp;
    const T* sv = tl.dvacc.data() + c * d.Dvp;
    for (int64_t e = 0; e < d.D; ++e) dk[e] = sk[e];
    for (int64_t e = 0; e < d.Dv; ++e) dv[e] = sv[e];
  }
}

}  // namespace

template <typename T>
void FlashBackward(const BwdArgs<T>& a) {
  const SdpaParams& p = *a.p;
  const Dims d(p);
  const T scale = static_cast<T>(p.scale);
  const Philox rng(p.seed, 0);
  const int64_t BH = d.B * d.H, BK = d.B * d.Hkv;

  const BwdOperands<T> packed(a, d, scale);
  const BwdContext<T> cx{a, d, packed, rng, static_cast<float>(p.dropout_p), static_cast<T>(1.0 / (1.0 - p.dropout_p))};
  const int64_t ntasks = BK * d.nkb;
  const int64_t nparts = std::max<int64_t>(1, std::min<int64_t>(NumThreads(), ntasks));
  const int64_t part_size = BH * d.Tp * d.Dp;
  Scratch<T> dqparts(nparts * part_size);

  // Part `part` takes tasks part, part + nparts, ... and owns one dQ accumulator.
  ParallelFor(nparts, 1, [&](int64_t plo, int64_t phi) {
    BwdTiles<T> tl(d);
    for (int64_t part = plo; part < phi; ++part) {
      T* dqp = dqparts.data() + part * part_size;
      for (int64_t task = part; task < ntasks; task += nparts) BwdKeyBlock(cx, tl, task, dqp);
    }
  });
  // dq = scale * sum over parts (fixed order).
  ParallelFor(BH * d.T, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t off = ((i / d.T) * d.Tp + i % d.T) * d.Dp;
      T* dq = a.dq + i * d.D;
      for (int64_t e = 0; e < d.D; ++e) dq[e] = dqparts.data()[off + e];
      for (int64_t part = 1; part < nparts; ++part) {
        const T* src = dqparts.data() + part * part_size + off;
        for (int64_t e = 0; e < d.D; ++e) dq[e] += src[e];
      }
      for (int64_t e = 0; e < d.D; ++e) dq[e] *= scale;
    }
  });
}

template void FlashForward<float>(const FwdArgs<float>&);
template void FlashForward<double>(const FwdArgs<double>&);
template void FlashBackward<float>(const BwdArgs<float>&);
template void FlashBackward<double>(const BwdArgs<double>&);

}  // namespace loom::kernels::sdpa::internal
