#include "kernels/cpu/matmul.h"

#include <cblas.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/shape_ops.h"

namespace loom::kernels::cpu {

absl::StatusOr<Shape> MatMulShape(absl::Span<const int64_t> a, absl::Span<const int64_t> b, bool trans_a,
                                  bool trans_b) {
  LOOM_RETURN_IF_ERROR(CheckRank("matmul", "a", a, 2));
  LOOM_RETURN_IF_ERROR(CheckRank("matmul", "b", b, 2));
  const size_t ra = a.size(), rb = b.size();
  int64_t m = trans_a ? a[ra - 1] : a[ra - 2];
  int64_t ka = trans_a ? a[ra - 2] : a[ra - 1];
  int64_t kb = trans_b ? b[rb - 1] : b[rb - 2];
  int64_t n = trans_b ? b[rb - 2] : b[rb - 1];
  if (ka != kb)
    return ArgError("matmul", "b",
                    absl::StrCat("contraction dim ", kb, " does not match a's ", ka, " (a ", ShapeToString(a),
                                 trans_a ? " transposed" : "", ", b ", ShapeToString(b),
                                 trans_b ? " transposed" : "", ")"));
  LOOM_ASSIGN_OR_RETURN(Shape out, BroadcastShapes("matmul", "a batch dims", a.subspan(0, ra - 2),
                                                   "b batch dims", b.subspan(0, rb - 2)));
  out.push_back(m);
  out.push_back(n);
  return out;
}

namespace {

absl::Status Validate(const Tensor& a, const Tensor& b, bool ta, bool tb, const Tensor& out,
                      Shape* shape) {
  LOOM_RETURN_IF_ERROR(CheckCpu("matmul", "a", a));
  LOOM_RETURN_IF_ERROR(CheckCpu("matmul", "b", b));
  LOOM_RETURN_IF_ERROR(CheckFloating("matmul", "a", a.dtype()));
  LOOM_RETURN_IF_ERROR(CheckSameDType("matmul", "a", a.dtype(), "b", b.dtype()));
  LOOM_ASSIGN_OR_RETURN(*shape, MatMulShape(a.shape(), b.shape(), ta, tb));
  return CheckOutput("matmul", "out", out, a.dtype(), *shape);
}

// How a [rows, cols] matrix view with strides (sr, sc) maps onto BLAS: either
// row-major with leading dim ld, or column-major (= transposed row-major).
struct BlasLayout {
  bool ok = false;
  bool col_major = false;
  int64_t ld = 0;
};

BlasLayout LayoutOf(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  BlasLayout l;
  const int64_t r1 = std::max<int64_t>(rows, 1), c1 = std::max<int64_t>(cols, 1);
  if ((sc == 1 || cols == 1) && (rows == 1 || sr >= c1)) {
    l.ok = true;
    l.ld = rows == 1 ? c1 : sr;
  } else if ((sr == 1 || rows == 1) && (cols == 1 || sc >= r1)) {
    l.ok = true;
    l.col_major = true;
    l.ld = cols == 1 ? r1 : sc;
  }
  return l;
}

template <typename T>
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc) {
  const CBLAS_TRANSPOSE tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, tra, trb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, tra, trb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  }
}

// One operand ready for BLAS: base pointer, per-batch offsets, layout.
template <typename T>
struct Operand {
  Tensor keep;  // owns a packed copy when one was needed
  const T* base = nullptr;
  BlasLayout layout;
  Strides batch_strides;  // over the output batch shape (0 = broadcast)
};

template <typename T>
Operand<T> Prepare(const Tensor& t, absl::Span<const int64_t> out_batch) {
  Operand<T> op;
  const int r = t.ndim();
  op.layout = LayoutOf(t.dim(r - 2), t.dim(r - 1), t.stride(r - 2), t.stride(r - 1));
  Tensor src = t;
  if (!op.layout.ok) {
    op.keep = Tensor::MustEmpty(t.shape(), t.dtype());
    CopyStrided(t, op.keep.raw_data());
    src = op.keep;
    op.layout = LayoutOf(src.dim(r - 2), src.dim(r - 1), src.stride(r - 2), src.stride(r - 1));
  }
  op.base = static_cast<const T*>(src.raw_data());
  // Batch strides of src broadcast to out_batch.
  op.batch_strides.assign(out_batch.size(), 0);
  const size_t lead = out_batch.size() - (r - 2);
  for (int i = 0; i < r - 2; ++i)
    if (src.dim(i) == out_batch[lead + i]) op.batch_strides[lead + i] = src.stride(i);
  return op;
}

// OpenBLAS runs single-threaded inside Loom's tasks (Loom's pool provides the
// parallelism, so the two thread pools never fight over the cores); the
// previous OpenBLAS setting is restored afterwards.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : prev_(openblas_get_num_threads()) {
    if (prev_ != 1) openblas_set_num_threads(1);
  }
  ~SingleThreadedBlas() {
    if (prev_ != 1) openblas_set_num_threads(prev_);
  }

 private:
  int prev_;
};

// A batch of same-shaped GEMMs over BLAS-ready operands.
template <typename T>
struct GemmPlan {
  const T* a = nullptr;
  const T* b = nullptr;
  T* c = nullptr;
  bool fa = false, fb = false;  // BLAS transpose flags
  int64_t lda = 0, ldb = 0;
  int64_t m = 0, n = 0, k = 0;
  Shape batch;               // output batch dims
  Strides a_batch, b_batch;  // element strides over `batch` (0 = broadcast)
};

// Splits the work into tasks (batch entries, then row or column blocks of
// each product) and runs one single-threaded GEMM per task on the pool.
template <typename T>
void RunPlan(const GemmPlan<T>& p) {
  const int64_t nbatch = NumElements(p.batch);
  const double total = 2.0 * p.m * p.n * p.k * nbatch;
  constexpr double kMinTaskFlops = 1 << 21;
  const int64_t want = std::max<int64_t>(
      1, static_cast<int64_t>(std::min<double>(2.0 * NumThreads(), total / kMinTaskFlops)));
  int64_t mb = 1, nb = 1;
  if (nbatch < want) {
    const int64_t per = (want + nbatch - 1) / nbatch;
    if (p.m >= p.n) mb = std::max<int64_t>(1, std::min<int64_t>(per, p.m / 16));
    else nb = std::max<int64_t>(1, std::min<int64_t>(per, p.n / 16));
  }
  const int64_t mstep = (p.m + mb - 1) / mb, nstep = (p.n + nb - 1) / nb;
  auto task = [&](int64_t t) {
    const int64_t bi = t / (mb * nb), i = (t % (mb * nb)) / nb, j = t % nb;
    const int64_t m0 = i * mstep, m1 = std::min(p.m, m0 + mstep);
    const int64_t n0 = j * nstep, n1 = std::min(p.n, n0 + nstep);
    if (m0 >= m1 || n0 >= n1) return;
    int64_t oa = 0, ob = 0, rem = bi;
    for (int d = static_cast<int>(p.batch.size()) - 1; d >= 0; --d) {
      const int64_t idx = rem % p.batch[d];
      rem /= p.batch[d];
      oa += idx * p.a_batch[d];
      ob += idx * p.b_batch[d];
    }
    // Row m0 of op(a): a column of the stored matrix when BLAS transposes it.
    const T* a = p.a + oa + (p.fa ? m0 : m0 * p.lda);
    const T* b = p.b + ob + (p.fb ? n0 * p.ldb : n0);
    T* c = p.c + bi * p.m * p.n + m0 * p.n + n0;
    Gemm<T>(p.fa, p.fb, m1 - m0, n1 - n0, p.k, a, p.lda, b, p.ldb, c, p.n);
  };
  SingleThreadedBlas single;
  const int64_t tasks = nbatch * mb * nb;
  if (tasks == 1) {
    task(0);
    return;
  }
  ParallelFor(tasks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) task(t);
  });
}

template <typename T>
void RunMatMul(const Tensor& a, const Tensor& b, bool ta, bool tb, Tensor& out) {
  const int ro = out.ndim();
  const int64_t m = out.dim(ro - 2), n = out.dim(ro - 1);
  const int64_t k = ta ? a.dim(-2) : a.dim(-1);
  T* c = static_cast<T*>(out.raw_data());
  if (out.numel() == 0) return;
  if (k == 0) {
    std::memset(c, 0, out.nbytes());
    return;
  }
  absl::Span<const int64_t> batch(out.shape().data(), ro - 2);
  GemmPlan<T> plan;
  plan.c = c;
  plan.n = n;
  plan.k = k;
  // Fold the batch into M: b shared by every batch entry, a contiguous and
  // not transposed, a's batch equal to the output batch.
  if (b.ndim() == 2 && !ta && a.is_contiguous() && a.ndim() == ro) {
    Operand<T> ob = Prepare<T>(b, {});
    plan.a = static_cast<const T*>(a.raw_data());
    plan.lda = k;
    plan.b = ob.base;
    plan.fb = tb != ob.layout.col_major;
    plan.ldb = ob.layout.ld;
    plan.m = NumElements(batch) * m;
    RunPlan(plan);
    return;
  }
  Operand<T> oa = Prepare<T>(a, batch), ob = Prepare<T>(b, batch);
  plan.a = oa.base;
  plan.b = ob.base;
  plan.fa = ta != oa.layout.col_major;
  plan.fb = tb != ob.layout.col_major;
  plan.lda = oa.layout.ld;
  plan.ldb = ob.layout.ld;
  plan.m = m;
  plan.batch = Shape(batch.begin(), batch.end());
  plan.a_batch = oa.batch_strides;
  plan.b_batch = ob.batch_strides;
  RunPlan(plan);
}

}  // namespace

absl::Status MatMul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Tensor& out) {
  Shape shape;
  LOOM_RETURN_IF_ERROR(Validate(a, b, trans_a, trans_b, out, &shape));
  LOOM_RETURN_IF_ERROR(
      CheckDType("matmul", "a", a.dtype(), {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}));
  if (a.dtype() == DType::kF32) {
    RunMatMul<float>(a, b, trans_a, trans_b, out);
  } else if (a.dtype() == DType::kF64) {
    RunMatMul<double>(a, b, trans_a, trans_b, out);
  } else {
    // 16-bit storage: compute in f32 (sgemm), round the result once.
    Tensor a32 = Tensor::MustEmpty(a.shape(), DType::kF32), b32 = Tensor::MustEmpty(b.shape(), DType::kF32);
    Tensor c32 = Tensor::MustEmpty(out.shape(), DType::kF32);
    LOOM_RETURN_IF_ERROR(CastKernel(a, a32));
    LOOM_RETURN_IF_ERROR(CastKernel(b, b32));
    RunMatMul<float>(a32, b32, trans_a, trans_b, c32);
    LOOM_RETURN_IF_ERROR(CastKernel(c32, out));
  }
  return absl::OkStatus();
}

absl::Status MatMulReference(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Tensor& out) {
  Shape shape;
  LOOM_RETURN_IF_ERROR(Validate(a, b, trans_a, trans_b, out, &shape));
  // Views as [batch..., M, K] and [batch..., K, N] broadcast to the output batch.
  Tensor av = trans_a ? a.Transpose(-1, -2) : a;
  Tensor bv = trans_b ? b.Transpose(-1, -2) : b;
  const int r = out.ndim();
  const int64_t m = out.dim(r - 2), n = out.dim(r - 1), k = av.dim(-1);
  Shape a_full(shape.begin(), shape.end() - 2), b_full = a_full;
  a_full.push_back(m);
  a_full.push_back(k);
  b_full.push_back(k);
  b_full.push_back(n);
  LOOM_ASSIGN_OR_RETURN(Tensor ae, av.Expand(a_full));
  LOOM_ASSIGN_OR_RETURN(Tensor be, bv.Expand(b_full));
  const int64_t nbatch = NumElements(absl::Span<const int64_t>(shape.data(), r - 2));
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += ae.GetDouble((bi * m + i) * k + p) * be.GetDouble((bi * k + p) * n + j);
        out.SetDouble((bi * m + i) * n + j, acc);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::kernels::cpu
