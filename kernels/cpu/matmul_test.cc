// matmul: BLAS kernel vs the triple-loop reference over odd shapes, all trans
// flags, broadcast batches, strided views, f32/f64, and bad input.
#include "kernels/cpu/matmul.h"

#include <cblas.h>

#include <thread>

#include "gtest/gtest.h"
#include "kernels/cpu/test_util.h"

namespace loom::kernels::cpu {
namespace {

using testing::FakeCuda;
using testing::Rand;
using testing::Tol;

double Compare(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  auto shape = MatMulShape(a.shape(), b.shape(), ta, tb);
  EXPECT_TRUE(shape.ok()) << shape.status();
  if (!shape.ok()) return INFINITY;
  Tensor k = Tensor::MustEmpty(*shape, a.dtype()), r = Tensor::MustEmpty(*shape, a.dtype());
  EXPECT_TRUE(MatMul(a, b, ta, tb, k).ok());
  EXPECT_TRUE(MatMulReference(a, b, ta, tb, r).ok());
  return RelativeError(k, r);
}

TEST(MatMul, SmallExactValues) {
  Tensor a = Tensor::FromVector({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::FromVector({2, 2}, {5, 6, 7, 8});
  Tensor c = Tensor::MustEmpty({2, 2}, DType::kF32);
  ASSERT_TRUE(MatMul(a, b, false, false, c).ok());
  EXPECT_EQ(c.ToVector(), (std::vector<double>{19, 22, 43, 50}));
  ASSERT_TRUE(MatMul(a, b, true, false, c).ok());  // a^T b
  EXPECT_EQ(c.ToVector(), (std::vector<double>{26, 30, 38, 44}));
}

TEST(MatMul, OddShapesAllTransFlagsBothDTypes) {
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 1, 5}, {2, 0, 3}, {0, 3, 4}, {33, 65, 31}};
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (const auto& s : shapes) {
      const int64_t m = s[0], k = s[1], n = s[2];
      for (int ta = 0; ta < 2; ++ta) {
        for (int tb = 0; tb < 2; ++tb) {
          Tensor a = Rand(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, dt, 1);
          Tensor b = Rand(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, dt, 2);
          EXPECT_LE(Compare(a, b, ta, tb), Tol(dt)) << m << "x" << k << "x" << n << " ta=" << ta << " tb=" << tb
                                                     << " " << DTypeName(dt);
        }
      }
    }
  }
}

TEST(MatMul, BroadcastBatches) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    // a batched, b 2-D (the folded single-GEMM path).
    EXPECT_LE(Compare(Rand({3, 4, 5}, dt), Rand({5, 6}, dt, 2), false, false), Tol(dt));
    EXPECT_LE(Compare(Rand({3, 4, 5}, dt), Rand({6, 5}, dt, 2), false, true), Tol(dt));
    // a 2-D, b batched.
    EXPECT_LE(Compare(Rand({4, 5}, dt), Rand({2, 3, 5, 6}, dt, 2), false, false), Tol(dt));
    // Both batched with broadcasting on different dims.
    EXPECT_LE(Compare(Rand({2, 1, 3, 5}, dt), Rand({4, 5, 7}, dt, 2), false, false), Tol(dt));
    EXPECT_LE(Compare(Rand({2, 1, 5, 3}, dt), Rand({1, 4, 7, 5}, dt, 2), true, true), Tol(dt));
  }
  auto s = MatMulShape(Shape{2, 1, 3, 5}, Shape{4, 5, 7}, false, false);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (Shape{2, 4, 3, 7}));
}

TEST(MatMul, StridedInputs) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    // Transposed views (column-major last two dims): no copy needed.
    Tensor at = Rand({6, 4}, dt).Transpose(0, 1);  // [4, 6], strides {1, 4}
    Tensor bt = Rand({5, 6}, dt, 2).Transpose(0, 1);  // [6, 5]
    EXPECT_LE(Compare(at, bt, false, false), Tol(dt));
    EXPECT_LE(Compare(at, Rand({5, 6}, dt, 3), false, true), Tol(dt));
    // Narrowed rows/cols: leading dim larger than the row length.
    Tensor wide = Rand({7, 20}, dt).Narrow(1, 3, 9);  // [7, 9], ld 20
    EXPECT_LE(Compare(wide, Rand({9, 4}, dt, 2), false, false), Tol(dt));
    // Batch dim not outermost in memory: [B, M, K] view of an [M, B, K] tensor.
    Tensor mbk = Rand({4, 3, 5}, dt).Permute(std::vector<int>{1, 0, 2});
    EXPECT_LE(Compare(mbk, Rand({3, 5, 2}, dt, 2), false, false), Tol(dt));
    EXPECT_LE(Compare(mbk, Rand({5, 2}, dt, 2), false, false), Tol(dt));
    // Neither last dim unit-stride: the kernel packs a copy.
    Tensor odd = Rand({5, 4, 2}, dt).Permute(std::vector<int>{2, 1, 0});  // [2, 4, 5] strides {1, 2, 8}
    EXPECT_LE(Compare(odd, Rand({5, 3}, dt, 2), false, false), Tol(dt));
    EXPECT_LE(Compare(Rand({2, 3, 4}, dt, 4), odd, false, false), Tol(dt));
    // Broadcast (stride-0) batch via Expand.
    Tensor ex = *Rand({1, 3, 4}, dt).Expand({5, 3, 4});
    EXPECT_LE(Compare(ex, Rand({5, 4, 2}, dt, 2), false, false), Tol(dt));
  }
}

TEST(MatMul, F32AgreesWithF64) {
  Tensor a = Rand({2, 31, 47}, DType::kF64), b = Rand({47, 29}, DType::kF64, 2);
  auto s = MatMulShape(a.shape(), b.shape(), false, false);
  Tensor c64 = Tensor::MustEmpty(*s, DType::kF64), c32 = Tensor::MustEmpty(*s, DType::kF32);
  ASSERT_TRUE(MatMul(a, b, false, false, c64).ok());
  ASSERT_TRUE(MatMul(a.To(DType::kF32), b.To(DType::kF32), false, false, c32).ok());
  EXPECT_LE(RelativeError(c32, c64), 1e-6);
}

TEST(MatMul, ParallelTaskSplits) {
  // Many small batch entries, rows split (m >= n), columns split (n > m),
  // strided batch: each runs as several single-threaded GEMM tasks.
  for (DType dt : {DType::kF32, DType::kF64}) {
    EXPECT_LE(Compare(Rand({16, 64, 40}, dt), Rand({16, 64, 40}, dt, 2), false, true), Tol(dt));
    EXPECT_LE(Compare(Rand({300, 200}, dt), Rand({200, 40}, dt, 2), false, false), Tol(dt));
    EXPECT_LE(Compare(Rand({8, 200}, dt), Rand({700, 200}, dt, 2), false, true), Tol(dt));
    EXPECT_LE(Compare(Rand({200, 2, 50}, dt).Permute(std::vector<int>{1, 0, 2}), Rand({50, 300}, dt, 2), false, false),
              Tol(dt));
    EXPECT_LE(Compare(Rand({4, 120, 60}, dt), Rand({4, 120, 90}, dt, 2), true, false), Tol(dt));
  }
}

TEST(MatMul, ConcurrentCallsAndBlasThreadSettingRestored) {
  openblas_set_num_threads(2);
  Tensor a = Rand({4, 96, 80}), b = Rand({80, 72}, DType::kF32, 2);
  double errs[3] = {1, 1, 1};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 2; ++rep) errs[t] = Compare(a, b, false, false);
    });
  for (auto& th : threads) th.join();
  for (double e : errs) EXPECT_LE(e, 2e-6);
  Tensor c = Tensor::MustEmpty({4, 96, 72}, DType::kF32);
  ASSERT_TRUE(MatMul(a, b, false, false, c).ok());
  EXPECT_EQ(openblas_get_num_threads(), 2);
}

TEST(MatMul, SixteenBitInputsComputeInF32) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Tensor a = Rand({2, 9, 17}, dt), b = Rand({9, 17}, dt, 2);  // b^T
    EXPECT_LE(Compare(a, b, false, true), 4e-3) << DTypeName(dt);  // one rounding of the output
    EXPECT_LE(Compare(a.Transpose(-1, -2), Rand({17, 5}, dt, 3), true, false), 4e-3) << DTypeName(dt);
  }
}

TEST(MatMul, LargeThroughRegistry) {
  Tensor a = Rand({130, 257}), b = Rand({257, 66}, DType::kF32, 2);
  EXPECT_LE(testing::KernelVsReference("matmul", {a, b}), 1e-5);
}

TEST(MatMul, BadInputNamesTheArgument) {
  Tensor a = Rand({3, 4}), b = Rand({4, 5}), out = Tensor::MustEmpty({3, 5}, DType::kF32);
  EXPECT_INVALID(MatMulShape(Shape{4}, Shape{4, 5}, false, false).status(), "matmul: a: expected at least 2 dims");
  EXPECT_INVALID(MatMulShape(Shape{3, 4}, Shape{5}, false, false).status(), "matmul: b: expected at least 2 dims");
  EXPECT_INVALID(MatMulShape(Shape{3, 4}, Shape{5, 6}, false, false).status(), "matmul: b: contraction dim 5");
  EXPECT_INVALID(MatMulShape(Shape{2, 3, 4}, Shape{3, 4, 5}, false, false).status(), "batch dims");
  EXPECT_INVALID(MatMul(a, Rand({4, 5}, DType::kF64), false, false, out), "matmul: b: dtype f64 does not match a");
  EXPECT_INVALID(MatMul(FakeCuda({3, 4}), b, false, false, out), "matmul: a: expected a cpu tensor");
  EXPECT_INVALID(MatMul(a, FakeCuda({4, 5}), false, false, out), "matmul: b: expected a cpu tensor");
  Tensor wrong = Tensor::MustEmpty({5, 3}, DType::kF32);
  EXPECT_INVALID(MatMul(a, b, false, false, wrong), "matmul: out: expected shape [3, 5]");
  Tensor ia = Tensor::Zeros({3, 4}, DType::kI32), ib = Tensor::Zeros({4, 5}, DType::kI32);
  EXPECT_INVALID(MatMul(ia, ib, false, false, out), "matmul: a: expected a floating dtype");
  // Through the registry: the InferFn rejects before any kernel runs.
  EXPECT_INVALID(kernels::RunOp("matmul", {a, Rand({5, 4})}).status(), "matmul: b: contraction dim");
  EXPECT_INVALID(kernels::RunOp("matmul", {a, b}, {{"trans_a", true}}).status(), "matmul: b:");
  EXPECT_INVALID(kernels::RunOp("matmul", {Rand({2, 2, 2, 3, 4}), Rand({3, 4, 5})}).status(), "do not broadcast");
}

}  // namespace
}  // namespace loom::kernels::cpu
