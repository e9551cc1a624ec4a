#include "kernels/cuda/reference.h"

#include <algorithm>
#include <cmath>

namespace loom::kernels::cuda::ref {

Vec Gemm(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const Vec& a, const Vec& b) {
  Vec d(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const double av = trans_a ? a[p * m + i] : a[i * k + p];
      if (av == 0.0) continue;
      for (int64_t j = 0; j < n; ++j) d[i * n + j] += av * (trans_b ? b[j * k + p] : b[p * n + j]);
    }
  }
  return d;
}

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluC = 0.044715;
}  // namespace

double GeluTanh(double x) { return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + kGeluC * x * x * x))); }
double DGeluTanh(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + kGeluC * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kGeluC * x * x);
}
double GeluErf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double DGeluErf(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

static void RowStats(const double* x, int64_t cols, double eps, double* mean, double* rstd) {
  double s = 0;
  for (int64_t c = 0; c < cols; ++c) s += x[c];
  const double mu = s / cols;
  double q = 0;
  for (int64_t c = 0; c < cols; ++c) q += (x[c] - mu) * (x[c] - mu);
  *mean = mu;
  *rstd = 1.0 / std::sqrt(q / cols + eps);
}

void LayerNormFwd(int64_t rows, int64_t cols, const Vec& x, const Vec& residual, const Vec& w, const Vec& b,
                  double eps, Vec* y, Vec* x_sum, Vec* mean, Vec* rstd) {
  Vec xs = x;
  if (!residual.empty())
    for (size_t i = 0; i < xs.size(); ++i) xs[i] += residual[i];
  y->assign(rows * cols, 0.0);
  mean->assign(rows, 0.0);
  rstd->assign(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &xs[r * cols];
    RowStats(xr, cols, eps, &(*mean)[r], &(*rstd)[r]);
    for (int64_t c = 0; c < cols; ++c)
      (*y)[r * cols + c] = (xr[c] - (*mean)[r]) * (*rstd)[r] * w[c] + (b.empty() ? 0.0 : b[c]);
  }
  if (residual.empty()) x_sum->clear();
  else *x_sum = std::move(xs);
}

void LayerNormBwd(int64_t rows, int64_t cols, const Vec& dy, const Vec& x, const Vec& w, double eps,
                  const Vec& dres, Vec* dx, Vec* dw, Vec* db) {
  dx->assign(rows * cols, 0.0);
  dw->assign(cols, 0.0);
  db->assign(cols, 0.0);
  Vec xh(cols);
  for (int64_t r = 0; r < rows; ++r) {
    double mu, rs;
    RowStats(&x[r * cols], cols, eps, &mu, &rs);
    double m1 = 0, m2 = 0;
    for (int64_t c = 0; c < cols; ++c) {
      xh[c] = (x[r * cols + c] - mu) * rs;
      const double g = dy[r * cols + c] * w[c];
      m1 += g;
      m2 += g * xh[c];
      (*dw)[c] += dy[r * cols + c] * xh[c];
      (*db)[c] += dy[r * cols + c];
    }
    m1 /= cols;
    m2 /= cols;
    for (int64_t c = 0; c < cols; ++c) {
      const double g = dy[r * cols + c] * w[c];
      (*dx)[r * cols + c] = rs * (g - m1 - xh[c] * m2) + (dres.empty() ? 0.0 : dres[r * cols + c]);
    }
  }
}

void CrossEntropy(int64_t rows, int64_t vocab, const Vec& logits, const std::vector<int32_t>& t, double scale,
                  Vec* losses, Vec* dlogits, Vec* lse) {
  losses->assign(rows, 0.0);
  dlogits->assign(rows * vocab, 0.0);
  if (lse) lse->assign(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = &logits[r * vocab];
    const double mx = *std::max_element(x, x + vocab);
    double s = 0;
    for (int64_t c = 0; c < vocab; ++c) s += std::exp(x[c] - mx);
    const double l = mx + std::log(s);
    if (lse) (*lse)[r] = l;
    if (t[r] < 0) continue;
    (*losses)[r] = l - x[t[r]];
    for (int64_t c = 0; c < vocab; ++c)
      (*dlogits)[r * vocab + c] = scale * (std::exp(x[c] - l) - (c == t[r] ? 1.0 : 0.0));
  }
}

}  // namespace loom::kernels::cuda::ref
