// fp64 CPU references for the CUDA kernels (gemm.h, layernorm.h, cross_entropy.h).
// Row-major, contiguous, plain loops: readable over fast. The CUDA checks
// (checks.h) feed these the same (dtype-rounded) inputs as the kernels.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::kernels::cuda::ref {

using Vec = std::vector<double>;

// D[m,n] = op(A) op(B); A stored [m,k] ([k,m] if trans_a), B [k,n] ([n,k] if trans_b).
Vec Gemm(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const Vec& a, const Vec& b);

double GeluTanh(double x);
double DGeluTanh(double x);  // d/dx GeluTanh
double GeluErf(double x);
double DGeluErf(double x);

// y = (x' - mean) * rstd * w + b with x' = x + residual (residual may be empty;
// then x_sum is left empty).
void LayerNormFwd(int64_t rows, int64_t cols, const Vec& x, const Vec& residual, const Vec& w, const Vec& b,
                  double eps, Vec* y, Vec* x_sum, Vec* mean, Vec* rstd);
// Gradients of LayerNormFwd w.r.t. its normalised input x (plus dres when not
// empty), weight and bias, for upstream gradient dy.
void LayerNormBwd(int64_t rows, int64_t cols, const Vec& dy, const Vec& x, const Vec& w, double eps,
                  const Vec& dres, Vec* dx, Vec* dw, Vec* db);

// losses[r] = logsumexp(x[r]) - x[r, t[r]] (0 for t < 0);
// dlogits = scale * (softmax - onehot) (0 rows for t < 0);
// lse[r] = logsumexp(x[r]) for every row (when lse is given).
void CrossEntropy(int64_t rows, int64_t vocab, const Vec& logits, const std::vector<int32_t>& t, double scale,
                  Vec* losses, Vec* dlogits, Vec* lse = nullptr);

}  // namespace loom::kernels::cuda::ref
