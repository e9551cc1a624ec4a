#include "kernels/cuda/attention/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cuda/attention/sdpa_dropout.h"

namespace loom::kernels::cuda::attention::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Softmax probabilities of row i of head (b, h) (row = (b H + h) Tq + i):
// p[j] for j < Tk (0 if masked). Returns the lse (-inf if every key is masked).
double RowProbs(const SdpaShape& s, const double* qi, const double* kh, int64_t row, std::vector<double>& p) {
  const int64_t D = s.head_dim, i = row % s.seq_q;
  double mx = -kInf;
  for (int64_t j = 0; j < s.seq_k; ++j) {
    double add = 0;
    if (!s.mask.empty()) {
      const double m = s.mask[row * s.seq_k + j];
      if (s.mask_bool ? m == 0 : m == -kInf) {
        p[j] = -kInf;
        continue;
      }
      if (!s.mask_bool) add = m;
    }
    if (s.causal && j > i) {
      p[j] = -kInf;
      continue;
    }
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += qi[d] * kh[j * D + d];
    p[j] = dot * s.scale + add;
    mx = std::max(mx, p[j]);
  }
  if (mx == -kInf) {  // nothing to attend to
    std::fill(p.begin(), p.end(), 0.0);
    return -kInf;
  }
  double sum = 0;
  for (int64_t j = 0; j < s.seq_k; ++j) {
    p[j] = std::isinf(p[j]) ? 0.0 : std::exp(p[j] - mx);
    sum += p[j];
  }
  for (int64_t j = 0; j < s.seq_k; ++j) p[j] /= sum;
  return mx + std::log(sum);
}

// Dropout's factor for probability (row, j): 0 or 1 / (1 - p).
double DropFactor(const SdpaShape& s, int64_t row, int64_t j) {
  if (s.dropout_p <= 0) return 1.0;
  const uint64_t idx = static_cast<uint64_t>(row) * s.seq_k + j;
  return attention::DropoutKeep(s.dropout_seed, s.dropout_offset, idx, static_cast<float>(s.dropout_p))
             ? 1.0 / (1.0 - static_cast<double>(static_cast<float>(s.dropout_p)))
             : 0.0;
}

}  // namespace

void SdpaForward(const SdpaShape& s, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, std::vector<double>* o, std::vector<double>* lse) {
  const int64_t D = s.head_dim, group = s.heads / s.kv_heads;
  o->assign(s.batch * s.heads * s.seq_q * D, 0.0);
  lse->assign(s.batch * s.heads * s.seq_q, 0.0);
  std::vector<double> p(s.seq_k);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t bh = b * s.heads + h, bhk = b * s.kv_heads + h / group;
      const double* kh = k.data() + bhk * s.seq_k * D;
      const double* vh = v.data() + bhk * s.seq_k * D;
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const int64_t row = bh * s.seq_q + i;
        (*lse)[row] = RowProbs(s, q.data() + row * D, kh, row, p);
        double* oi = o->data() + row * D;
        for (int64_t j = 0; j < s.seq_k; ++j)
          if (p[j] != 0) {
            const double pz = p[j] * DropFactor(s, row, j);
            for (int64_t d = 0; d < D; ++d) oi[d] += pz * vh[j * D + d];
          }
      }
    }
}

void SdpaBackward(const SdpaShape& s, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& dout, std::vector<double>* dq,
                  std::vector<double>* dk, std::vector<double>* dv) {
  const int64_t D = s.head_dim, group = s.heads / s.kv_heads;
  dq->assign(q.size(), 0.0);
  dk->assign(k.size(), 0.0);
  dv->assign(v.size(), 0.0);
  std::vector<double> p(s.seq_k), dp(s.seq_k);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t bh = b * s.heads + h, bhk = b * s.kv_heads + h / group;
      const double* kh = k.data() + bhk * s.seq_k * D;
      const double* vh = v.data() + bhk * s.seq_k * D;
      double* dkh = dk->data() + bhk * s.seq_k * D;
      double* dvh = dv->data() + bhk * s.seq_k * D;
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const int64_t row = bh * s.seq_q + i;
        const double* qi = q.data() + row * D;
        const double* doi = dout.data() + row * D;
        double* dqi = dq->data() + row * D;
        RowProbs(s, qi, kh, row, p);
        // With dropout the output uses p z (z = 0 or 1/(1-p)): d(p_j) = z_j dO.v_j.
        double delta = 0;
        for (int64_t j = 0; j < s.seq_k; ++j) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += doi[d] * vh[j * D + d];
          dp[j] = x * DropFactor(s, row, j);
          delta += p[j] * dp[j];
        }
        for (int64_t j = 0; j < s.seq_k; ++j) {
          if (p[j] == 0) continue;
          const double ds = p[j] * (dp[j] - delta) * s.scale;
          const double pz = p[j] * DropFactor(s, row, j);
          for (int64_t d = 0; d < D; ++d) {
            dvh[j * D + d] += pz * doi[d];
            dqi[d] += ds * kh[j * D + d];
            dkh[j * D + d] += ds * qi[d];
          }
        }
      }
    }
}

}  // namespace loom::kernels::cuda::attention::ref
