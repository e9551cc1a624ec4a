#include "kernels/cuda/attention/attention_reference.h"

#include <cmath>
#include <limits>

namespace loom::cuda::ref {
namespace {

// Softmax probabilities of row i of head (b, h): p[j] for j < Tk (0 if masked).
double RowProbs(const SdpaShape& s, const double* qi, const double* kh, int64_t i, std::vector<double>& p) {
  const int64_t D = s.head_dim;
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < s.seq_k; ++j) {
    if (s.causal && j > i) {
      p[j] = -std::numeric_limits<double>::infinity();
      continue;
    }
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += qi[d] * kh[j * D + d];
    p[j] = dot * s.scale;
    mx = std::max(mx, p[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < s.seq_k; ++j) {
    p[j] = std::isinf(p[j]) ? 0.0 : std::exp(p[j] - mx);
    sum += p[j];
  }
  for (int64_t j = 0; j < s.seq_k; ++j) p[j] /= sum;
  return mx + std::log(sum);
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
        (*lse)[bh * s.seq_q + i] = RowProbs(s, q.data() + (bh * s.seq_q + i) * D, kh, i, p);
        double* oi = o->data() + (bh * s.seq_q + i) * D;
        for (int64_t j = 0; j < s.seq_k; ++j)
          if (p[j] != 0)
            for (int64_t d = 0; d < D; ++d) oi[d] += p[j] * vh[j * D + d];
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
        const double* qi = q.data() + (bh * s.seq_q + i) * D;
        const double* doi = dout.data() + (bh * s.seq_q + i) * D;
        double* dqi = dq->data() + (bh * s.seq_q + i) * D;
        RowProbs(s, qi, kh, i, p);
        double delta = 0;
        for (int64_t j = 0; j < s.seq_k; ++j) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += doi[d] * vh[j * D + d];
          dp[j] = x;
          delta += p[j] * x;
        }
        for (int64_t j = 0; j < s.seq_k; ++j) {
          if (p[j] == 0) continue;
          const double ds = p[j] * (dp[j] - delta) * s.scale;
          for (int64_t d = 0; d < D; ++d) {
            dvh[j * D + d] += p[j] * doi[d];
            dqi[d] += ds * kh[j * D + d];
            dkh[j * D + d] += ds * qi[d];
          }
        }
      }
    }
}

}  // namespace loom::cuda::ref
