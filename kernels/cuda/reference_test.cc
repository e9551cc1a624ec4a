// The fp64 references checked against finite differences and hand values, so
// the GPU checks compare against something right.
#include "kernels/cuda/reference.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace loom::kernels::cuda::ref {
namespace {

Vec Seq(int64_t n, double a, double b) {
  Vec v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(a * i + b) * 1.3;
  return v;
}

TEST(Reference, GemmTransposes) {
  // A = [[1,2],[3,4]], B = [[5,6],[7,8]]: AB = [[19,22],[43,50]], A^T B = [[26,30],[38,44]].
  Vec a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  EXPECT_EQ(Gemm(2, 2, 2, false, false, a, b), (Vec{19, 22, 43, 50}));
  EXPECT_EQ(Gemm(2, 2, 2, true, false, a, b), (Vec{26, 30, 38, 44}));
  EXPECT_EQ(Gemm(2, 2, 2, false, true, a, b), (Vec{17, 23, 39, 53}));  // A B^T
}

TEST(Reference, GeluDerivatives) {
  for (double x : {-3.0, -0.7, 0.0, 0.4, 2.5}) {
    const double h = 1e-6;
    EXPECT_NEAR(DGeluTanh(x), (GeluTanh(x + h) - GeluTanh(x - h)) / (2 * h), 1e-8);
    EXPECT_NEAR(DGeluErf(x), (GeluErf(x + h) - GeluErf(x - h)) / (2 * h), 1e-8);
  }
  EXPECT_NEAR(GeluErf(1.0), 0.8413447460685429, 1e-12);
}

TEST(Reference, LayerNormBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 7;
  Vec x = Seq(rows * cols, 0.7, 0.1), w = Seq(cols, 1.1, 0.5), b = Seq(cols, 0.3, 0.2);
  Vec dy = Seq(rows * cols, 0.37, 1.0), dres = Seq(rows * cols, 0.9, 0.3);
  const double eps = 1e-5;
  auto loss = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
    Vec y, xs, mean, rstd;
    LayerNormFwd(rows, cols, xx, {}, ww, bb, eps, &y, &xs, &mean, &rstd);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * dy[i] + xx[i] * dres[i];
    return l;
  };
  Vec dx, dw, db;
  LayerNormBwd(rows, cols, dy, x, w, eps, dres, &dx, &dw, &db);
  const double h = 1e-6;
  for (int64_t i = 0; i < rows * cols; ++i) {
    Vec xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    EXPECT_NEAR(dx[i], (loss(xp, w, b) - loss(xm, w, b)) / (2 * h), 1e-6) << i;
  }
  for (int64_t c = 0; c < cols; ++c) {
    Vec wp = w, wm = w, bp = b, bm = b;
    wp[c] += h;
    wm[c] -= h;
    bp[c] += h;
    bm[c] -= h;
    EXPECT_NEAR(dw[c], (loss(x, wp, b) - loss(x, wm, b)) / (2 * h), 1e-6);
    EXPECT_NEAR(db[c], (loss(x, w, bp) - loss(x, w, bm)) / (2 * h), 1e-6);
  }
}

TEST(Reference, LayerNormResidualNormalisesTheSum) {
  Vec x = Seq(8, 0.5, 0.0), r = Seq(8, 0.2, 1.0), w(4, 1.0), b;
  Vec y1, xs, m1, s1, y2, xs2, m2, s2;
  LayerNormFwd(2, 4, x, r, w, b, 1e-5, &y1, &xs, &m1, &s1);
  Vec sum(8);
  for (int i = 0; i < 8; ++i) sum[i] = x[i] + r[i];
  LayerNormFwd(2, 4, sum, {}, w, b, 1e-5, &y2, &xs2, &m2, &s2);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(xs, sum);
}

TEST(Reference, CrossEntropyGradientMatchesFiniteDifferences) {
  const int64_t rows = 3, vocab = 5;
  Vec x = Seq(rows * vocab, 1.7, 0.2);
  std::vector<int32_t> t = {2, -1, 4};
  Vec losses, dl;
  Vec lse;
  CrossEntropy(rows, vocab, x, t, 1.0, &losses, &dl, &lse);
  EXPECT_EQ(losses[1], 0.0);
  // lse for every row, ignored ones too: loss = lse - x[t], lse > the row's max.
  EXPECT_NEAR(losses[0], lse[0] - x[2], 1e-12);
  EXPECT_NEAR(losses[2], lse[2] - x[2 * vocab + 4], 1e-12);
  EXPECT_GT(lse[1], *std::max_element(x.begin() + vocab, x.begin() + 2 * vocab));
  const double h = 1e-6;
  for (int64_t i = 0; i < rows * vocab; ++i) {
    Vec xp = x, xm = x, lp, lm, d;
    xp[i] += h;
    xm[i] -= h;
    CrossEntropy(rows, vocab, xp, t, 1.0, &lp, &d);
    CrossEntropy(rows, vocab, xm, t, 1.0, &lm, &d);
    double fd = 0;
    for (int64_t r = 0; r < rows; ++r) fd += (lp[r] - lm[r]) / (2 * h);
    EXPECT_NEAR(dl[i], fd, 1e-6) << i;
  }
}

}  // namespace
}  // namespace loom::kernels::cuda::ref
