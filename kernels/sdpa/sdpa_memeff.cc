// Memory-efficient SDPA ("memeff"): any mask (bool or additive, broadcast), one
// block of kRb query rows at a time with the full key row (O(S) memory per row,
// no T x S matrix).
//
// Forward: ParallelFor over (b, h, row block): scores[kRb, S] by the tile GEMM,
// + mask, causal, softmax over the full row, dropout, out = P V.
// Backward: ParallelFor over (b, kv head); each task owns dK, dV of its kv head
// (summed over the G query heads), recomputes P = exp(S + mask - lse) per row
// block and writes dQ rows directly.
#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/sdpa/sdpa_internal.h"

namespace loom::kernels::sdpa::internal {

namespace {

constexpr int64_t kRb = 32;  // query rows per block

struct MDims {
  int64_t B, H, Hkv, G, T, S, D, Dv, Dp, Dvp, Sp, nrb;
  explicit MDims(const SdpaParams& p)
      : B(p.B), H(p.H), Hkv(p.Hkv), G(p.group()), T(p.T), S(p.S), D(p.D), Dv(p.Dv), Dp(RoundUp(p.D, 16)),
        Dvp(RoundUp(p.Dv, 16)), Sp(RoundUp(p.S, 16)), nrb((p.T + kRb - 1) / kRb), ldt(Sp + 16) {}
  int64_t ldt;  // leading dim of K^T, V^T and score rows (padded: no 4 KiB-strided rows)
};

// Scores of rows [i0, i0+nr) of head (b, h): s[r, :S] = (q*scale) k^T + mask, causal
// entries -inf, columns >= S zero. qt holds q*scale [kRb, Dp].
template <typename T>
void Scores(const SdpaParams& p, const MDims& d, const MaskView& mask, int64_t b, int64_t h, int64_t i0, int64_t nr,
            const T* qt, const T* ktb, T* s, T* add) {
  const T ninf = -std::numeric_limits<T>::infinity();
  const int64_t mr = RoundUp(nr, 4);
  GemmSet<T>(mr, d.Sp, d.D, qt, d.Dp, 1, ktb, d.ldt, s, d.ldt);
  for (int64_t r = 0; r < nr; ++r) {
    T* row = s + r * d.ldt;
    const int64_t t = i0 + r;
    if (mask.kind != MaskKind::kNone) {
      mask.Row<T>(b, h, t, d.S, add);
      for (int64_t c = 0; c < d.S; ++c) row[c] += add[c];
    }
    if (p.is_causal)
      for (int64_t c = t + 1; c < d.S; ++c) row[c] = ninf;
  }
}

// qt[r, :D] = q[t, :] * scale for rows of the block (padding zero).
template <typename T>
void LoadRows(const T* src, int64_t nr, int64_t cols, int64_t ld, T s, T* dst, int64_t rows_cap) {
  std::memset(dst, 0, sizeof(T) * rows_cap * ld);
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ld + c] = src[r * cols + c] * s;
}

}  // namespace

template <typename T>
void MemEffForward(const FwdArgs<T>& a) {
  const SdpaParams& p = *a.p;
  const MDims d(p);
  const T scale = static_cast<T>(p.scale);
  const T ninf = -std::numeric_limits<T>::infinity();
  const float drop = static_cast<float>(p.dropout_p);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const Philox rng(p.seed, 0);
  Scratch<T> kt(d.B * d.Hkv * d.D * d.ldt), vp(d.B * d.Hkv * d.Sp * d.Dvp);
  PackTransposed<T>(a.k, d.B * d.Hkv, d.S, d.D, kt.data(), d.ldt);
  PackRows<T>(a.v, d.B * d.Hkv, d.S, d.Dv, vp.data(), d.Sp, d.Dvp, T(1));

  ParallelFor(d.B * d.H * d.nrb, 1, [&](int64_t lo, int64_t hi) {
    Scratch<T> qt(kRb * d.Dp), s(kRb * d.ldt), ot(kRb * d.Dvp), add(d.Sp), mult(d.Sp);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t bh = task / d.nrb, rb = task % d.nrb;
      const int64_t b = bh / d.H, h = bh % d.H, bk = b * d.Hkv + h / d.G;
      const int64_t i0 = rb * kRb, nr = std::min(kRb, d.T - i0), mr = RoundUp(nr, 4);
      LoadRows<T>(a.q + (bh * d.T + i0) * d.D, nr, d.D, d.Dp, scale, qt.data(), kRb);
      Scores<T>(p, d, a.mask, b, h, i0, nr, qt.data(), kt.data() + bk * d.D * d.ldt, s.data(), add.data());
      for (int64_t r = 0; r < mr; ++r) {
        T* row = s.data() + r * d.ldt;
        const int64_t t = i0 + r;
        const T m = r < nr ? RowMax<T>(row, d.S) : ninf;
        if (m == ninf) {
          std::memset(row, 0, sizeof(T) * d.Sp);
          if (r < nr) a.lse[bh * d.T + t] = ninf;
          continue;
        }
        const T sum = ExpSubSum<T>(row, d.S, m);
        a.lse[bh * d.T + t] = m + std::log(sum);
        T inv = T(1) / sum;
        if (drop > 0) {
          DropoutMultipliers<T>(rng, static_cast<uint64_t>((bh * d.T + t) * d.S), d.S, drop, keep_scale,
                                mult.data());
          for (int64_t c = 0; c < d.S; ++c) row[c] *= inv * mult.data()[c];
        } else {
          for (int64_t c = 0; c < d.S; ++c) row[c] *= inv;
        }
      }
      GemmSet<T>(mr, d.Dvp, d.S, s.data(), d.ldt, 1, vp.data() + bk * d.Sp * d.Dvp, d.Dvp, ot.data(), d.Dvp);
      for (int64_t r = 0; r < nr; ++r) {
        T* out = a.out + (bh * d.T + i0 + r) * d.Dv;
        for (int64_t c = 0; c < d.Dv; ++c) out[c] = ot.data()[r * d.Dvp + c];
      }
    }
  });
}

template <typename T>
void MemEffBackward(const BwdArgs<T>& a) {
  const SdpaParams& p = *a.p;
  const MDims d(p);
  const T scale = static_cast<T>(p.scale);
  const T ninf = -std::numeric_limits<T>::infinity();
  const float drop = static_cast<float>(p.dropout_p);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const Philox rng(p.seed, 0);
  const int64_t BK = d.B * d.Hkv;
  Scratch<T> kt(BK * d.D * d.ldt), kp(BK * d.Sp * d.Dp), vt(BK * d.Dv * d.ldt);
  PackTransposed<T>(a.k, BK, d.S, d.D, kt.data(), d.ldt);
  PackRows<T>(a.k, BK, d.S, d.D, kp.data(), d.Sp, d.Dp, T(1));
  PackTransposed<T>(a.v, BK, d.S, d.Dv, vt.data(), d.ldt);

  ParallelFor(BK, 1, [&](int64_t lo, int64_t hi) {
    Scratch<T> qt(kRb * d.Dp), dot(kRb * d.Dvp), s(kRb * d.ldt), pd(kRb * d.ldt), dp(kRb * d.ldt), mult(kRb * d.ldt),
        add(d.Sp), dqt(kRb * d.Dp), dkacc(d.Sp * d.Dp), dvacc(d.Sp * d.Dvp);
    for (int64_t bk = lo; bk < hi; ++bk) {
      const int64_t b = bk / d.Hkv, hk = bk % d.Hkv;
      dkacc.Zero();
      dvacc.Zero();
      for (int64_t h = hk * d.G; h < (hk + 1) * d.G; ++h) {
        const int64_t bh = b * d.H + h;
        for (int64_t rb = 0; rb < d.nrb; ++rb) {
          const int64_t i0 = rb * kRb, nr = std::min(kRb, d.T - i0), mr = RoundUp(nr, 4);
          LoadRows<T>(a.q + (bh * d.T + i0) * d.D, nr, d.D, d.Dp, scale, qt.data(), kRb);
          LoadRows<T>(a.dout + (bh * d.T + i0) * d.Dv, nr, d.Dv, d.Dvp, T(1), dot.data(), kRb);
          Scores<T>(p, d, a.mask, b, h, i0, nr, qt.data(), kt.data() + bk * d.D * d.ldt, s.data(), add.data());
          // P = exp(S - lse); Pd = P * mult.
          const T* pdrop = s.data();
          for (int64_t r = 0; r < mr; ++r) {
            T* row = s.data() + r * d.ldt;
            const T l = r < nr ? a.lse[bh * d.T + i0 + r] : ninf;
            if (l == ninf) {
              std::memset(row, 0, sizeof(T) * d.Sp);
            } else {
              ExpSub<T>(row, d.S, l);
            }
          }
          if (drop > 0) {
            for (int64_t r = 0; r < mr; ++r) {
              T* mrow = mult.data() + r * d.ldt;
              std::fill(mrow, mrow + d.Sp, T(0));
              if (r < nr)
                DropoutMultipliers<T>(rng, static_cast<uint64_t>((bh * d.T + i0 + r) * d.S), d.S, drop, keep_scale,
                                      mrow);
              for (int64_t c = 0; c < d.Sp; ++c) pd.data()[r * d.ldt + c] = s.data()[r * d.ldt + c] * mrow[c];
            }
            pdrop = pd.data();
          }
          // dV += Pd^T dO.
          GemmAcc<T>(d.Sp, d.Dvp, nr, pdrop, 1, d.ldt, dot.data(), d.Dvp, dvacc.data(), d.Dvp);
          // dP = dO V^T; dS = P * (dP * mult - rowsum(dO * O)).
          GemmSet<T>(mr, d.Sp, d.Dv, dot.data(), d.Dvp, 1, vt.data() + bk * d.Dv * d.ldt, d.ldt, dp.data(), d.ldt);
          for (int64_t r = 0; r < mr; ++r) {
            T* dprow = dp.data() + r * d.ldt;
            const T* prow = s.data() + r * d.ldt;
            if (r >= nr) {
              std::memset(dprow, 0, sizeof(T) * d.Sp);
              continue;
            }
            const T* go = a.dout + (bh * d.T + i0 + r) * d.Dv;
            const T* o = a.out + (bh * d.T + i0 + r) * d.Dv;
            T di = 0;
            for (int64_t c = 0; c < d.Dv; ++c) di += go[c] * o[c];
            if (drop > 0) {
              const T* mrow = mult.data() + r * d.ldt;
              for (int64_t c = 0; c < d.Sp; ++c) dprow[c] = prow[c] * (dprow[c] * mrow[c] - di);
            } else {
              for (int64_t c = 0; c < d.Sp; ++c) dprow[c] = prow[c] * (dprow[c] - di);
            }
          }
          // dK += dS^T (q*scale); dQ = scale * dS K.
          GemmAcc<T>(d.Sp, d.Dp, nr, dp.data(), 1, d.ldt, qt.data(), d.Dp, dkacc.data(), d.Dp);
          GemmSet<T>(mr, d.Dp, d.S, dp.data(), d.ldt, 1, kp.data() + bk * d.Sp * d.Dp, d.Dp, dqt.data(), d.Dp);
          for (int64_t r = 0; r < nr; ++r) {
            T* dq = a.dq + (bh * d.T + i0 + r) * d.D;
            for (int64_t c = 0; c < d.D; ++c) dq[c] = dqt.data()[r * d.Dp + c] * scale;
          }
        }
      }
      for (int64_t c = 0; c < d.S; ++c) {
        T* dk = a.dk + (bk * d.S + c) * d.D;
        T* dv = a.dv + (bk * d.S + c) * d.Dv;
        for (int64_t e = 0; e < d.D; ++e) dk[e] = dkacc.data()[c * d.Dp + e];
        for (int64_t e = 0; e < d.Dv; ++e) dv[e] = dvacc.data()[c * d.Dvp + e];
      }
    }
  });
}

template void MemEffForward<float>(const FwdArgs<float>&);
template void MemEffForward<double>(const FwdArgs<double>&);
template void MemEffBackward<float>(const BwdArgs<float>&);
template void MemEffBackward<double>(const BwdArgs<double>&);

}  // namespace loom::kernels::sdpa::internal
