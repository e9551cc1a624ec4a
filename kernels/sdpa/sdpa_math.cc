// The plain SDPA reference ("math"): per (b, h) it materialises the T x S scores,
// softmax, dropout multipliers and the products, written for readability. Runs in
// f64 and f32. The backward recomputes P from scratch (it ignores the saved lse).
#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/sdpa/sdpa_internal.h"

namespace loom::kernels::sdpa::internal {

namespace {

// Fills P[T x S] for (b, h): softmax(scale q k^T + mask, causal) without dropout,
// and lse[T] (-inf for fully masked rows, whose P row is 0).
template <typename T>
void Probabilities(const SdpaParams& p, const T* q, const T* k, const MaskView& mask, int64_t b, int64_t h, T* P,
                   T* lse) {
  const int64_t Tn = p.T, S = p.S, D = p.D;
  const T scale = static_cast<T>(p.scale);
  const T ninf = -std::numeric_limits<T>::infinity();
  std::vector<T> add(S);
  for (int64_t t = 0; t < Tn; ++t) {
    const T* qt = q + t * D;
    T* row = P + t * S;
    for (int64_t s = 0; s < S; ++s) {
      const T* ks = k + s * D;
      T dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += qt[d] * ks[d];
      row[s] = scale * dot;
    }
    if (mask.kind != MaskKind::kNone) {
      mask.Row<T>(b, h, t, S, add.data());
      for (int64_t s = 0; s < S; ++s) row[s] += add[s];
    }
    if (p.is_causal)
      for (int64_t s = t + 1; s < S; ++s) row[s] = ninf;
    T m = ninf;
    for (int64_t s = 0; s < S; ++s) m = std::max(m, row[s]);
    if (m == ninf) {
      std::fill(row, row + S, T(0));
      lse[t] = ninf;
      continue;
    }
    T sum = 0;
    for (int64_t s = 0; s < S; ++s) {
      row[s] = std::exp(row[s] - m);
      sum += row[s];
    }
    for (int64_t s = 0; s < S; ++s) row[s] /= sum;
    lse[t] = m + std::log(sum);
  }
}

// Dropout multipliers M[T x S] for (b, h) (all ones without dropout).
template <typename T>
void DropoutMatrix(const SdpaParams& p, int64_t b, int64_t h, T* M) {
  const int64_t n = p.T * p.S;
  if (p.dropout_p <= 0) {
    std::fill(M, M + n, T(1));
    return;
  }
  Philox rng(p.seed, 0);
  uint64_t idx0 = static_cast<uint64_t>((b * p.H + h) * p.T) * static_cast<uint64_t>(p.S);
  DropoutMultipliers<T>(rng, idx0, n, static_cast<float>(p.dropout_p), static_cast<T>(1.0 / (1.0 - p.dropout_p)), M);
}

}  // namespace

template <typename T>
void MathForward(const FwdArgs<T>& a) {
  const SdpaParams& p = *a.p;
  const int64_t G = p.group(), Tn = p.T, S = p.S, D = p.D, Dv = p.Dv;
  ParallelFor(p.B * p.H, 1, [&](int64_t lo, int64_t hi) {
    // T x S buffers through the default allocator (visible to CountingAllocator).
    Tensor Pt = Tensor::MustEmpty({Tn * S}, DTypeOf<T>::value), Mt = Tensor::MustEmpty({Tn * S}, DTypeOf<T>::value);
    T* P = Pt.data<T>();
    T* M = Mt.data<T>();
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / p.H, h = bh % p.H, bk = b * p.Hkv + h / G;
      const T* q = a.q + bh * Tn * D;
      const T* k = a.k + bk * S * D;
      const T* v = a.v + bk * S * Dv;
      T* out = a.out + bh * Tn * Dv;
      Probabilities<T>(p, q, k, a.mask, b, h, P, a.lse + bh * Tn);
      DropoutMatrix<T>(p, b, h, M);
      for (int64_t t = 0; t < Tn; ++t) {
        T* o = out + t * Dv;
        std::fill(o, o + Dv, T(0));
        for (int64_t s = 0; s < S; ++s) {
          const T w = P[t * S + s] * M[t * S + s];
          const T* vs = v + s * Dv;
          for (int64_t d = 0; d < Dv; ++d) o[d] += w * vs[d];
        }
      }
    }
  });
}

template <typename T>
void MathBackward(const BwdArgs<T>& a) {
  const SdpaParams& p = *a.p;
  const int64_t G = p.group(), Tn = p.T, S = p.S, D = p.D, Dv = p.Dv;
  const T scale = static_cast<T>(p.scale);
  // Each task owns one kv head (dk, dv) and the G query heads that share it.
  ParallelFor(p.B * p.Hkv, 1, [&](int64_t lo, int64_t hi) {
    const DType dt = DTypeOf<T>::value;
    Tensor Pt = Tensor::MustEmpty({Tn * S}, dt), Mt = Tensor::MustEmpty({Tn * S}, dt),
           dPt = Tensor::MustEmpty({Tn * S}, dt), lset = Tensor::MustEmpty({Tn}, dt);
    T* P = Pt.data<T>();
    T* M = Mt.data<T>();
    T* dP = dPt.data<T>();
    T* lse = lset.data<T>();
    for (int64_t bk = lo; bk < hi; ++bk) {
      const int64_t b = bk / p.Hkv, hk = bk % p.Hkv;
      const T* k = a.k + bk * S * D;
      const T* v = a.v + bk * S * Dv;
      T* dk = a.dk + bk * S * D;
      T* dv = a.dv + bk * S * Dv;
      std::fill(dk, dk + S * D, T(0));
      std::fill(dv, dv + S * Dv, T(0));
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        const int64_t bh = b * p.H + h;
        const T* q = a.q + bh * Tn * D;
        const T* dout = a.dout + bh * Tn * Dv;
        T* dq = a.dq + bh * Tn * D;
        Probabilities<T>(p, q, k, a.mask, b, h, P, lse);
        DropoutMatrix<T>(p, b, h, M);
        for (int64_t t = 0; t < Tn; ++t) {
          const T* go = dout + t * Dv;
          T rowsum = 0;
          for (int64_t s = 0; s < S; ++s) {
            const T* vs = v + s * Dv;
            T dpd = 0;  // d loss / d (dropped P)
            for (int64_t d = 0; d < Dv; ++d) dpd += go[d] * vs[d];
            dP[t * S + s] = dpd * M[t * S + s];  // d loss / d P
            rowsum += P[t * S + s] * dP[t * S + s];
            // dv_s += (P*M)[t,s] * dout_t
            const T w = P[t * S + s] * M[t * S + s];
            T* dvs = dv + s * Dv;
            for (int64_t d = 0; d < Dv; ++d) dvs[d] += w * go[d];
          }
          const T* qt = q + t * D;
          T* dqt = dq + t * D;
          std::fill(dqt, dqt + D, T(0));
          for (int64_t s = 0; s < S; ++s) {
            const T ds = P[t * S + s] * (dP[t * S + s] - rowsum) * scale;
            const T* ks = k + s * D;
            T* dks = dk + s * D;
            for (int64_t d = 0; d < D; ++d) {
              dqt[d] += ds * ks[d];
              dks[d] += ds * qt[d];
            }
          }
        }
      }
    }
  });
}

template void MathForward<float>(const FwdArgs<float>&);
template void MathForward<double>(const FwdArgs<double>&);
template void MathBackward<float>(const BwdArgs<float>&);
template void MathBackward<double>(const BwdArgs<double>&);

}  // namespace loom::kernels::sdpa::internal
