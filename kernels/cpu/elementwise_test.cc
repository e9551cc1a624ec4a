// Elementwise kernels vs references: every binary and unary op, broadcasting,
// strided inputs, f32/f64/bf16, the parallel paths, NaN handling, bad input;
// integer semantics (wrapping, division truncating toward zero, exactness
// beyond 2^53) and pow's gradient at the edges of its domain.
#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/cpu/test_util.h"

namespace loom::kernels::cpu {
namespace {

using testing::FakeCuda;
using testing::KernelVsReference;
using testing::Rand;
using testing::Eval;
using testing::Tol;

const char* kBinary[] = {"add", "sub", "mul", "div", "maximum", "minimum", "relu_backward"};

TEST(Elementwise, BinaryBroadcastShapesAllDTypes) {
  const std::vector<std::vector<int64_t>> pairs[] = {
      {{3, 5, 7}, {3, 5, 7}}, {{3, 5, 7}, {5, 1}}, {{3, 1, 7}, {4, 1}}, {{2, 9}, {}},
      {{}, {4, 3}},           {{1}, {6}},          {{2, 1, 3, 1}, {5, 1, 4}}, {{0, 3}, {3}}};
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    for (const char* op : kBinary) {
      for (const auto& p : pairs) {
        Tensor a = Rand(p[0], dt, 1), b = Rand(p[1], dt, 2, 0.5, 2.0);
        EXPECT_LE(KernelVsReference(op, {a, b}), Tol(dt)) << op << " " << ShapeToString(p[0]) << " "
                                                          << ShapeToString(p[1]) << " " << DTypeName(dt);
      }
    }
  }
}

TEST(Elementwise, UnaryAllOpsAllDTypes) {
  struct U {
    const char* op;
    kernels::Attrs attrs;
    double lo, hi;
  };
  const U unary[] = {{"neg", {}, -1, 1},          {"exp", {}, -2, 2},          {"log", {}, 0.1, 3},
                     {"sqrt", {}, 0, 3},          {"rsqrt", {}, 0.1, 3},       {"tanh", {}, -3, 3},
                     {"sigmoid", {}, -20, 20},    {"relu", {}, -1, 1},         {"abs", {}, -1, 1},
                     {"scale", {{"s", -1.5}}, -1, 1}, {"add_scalar", {{"s", 2.0}}, -1, 1},
                     {"pow_scalar", {{"p", 2.5}}, 0.1, 2}, {"pow_scalar", {{"p", 2.0}}, -2, 2},
                     {"pow_scalar", {{"p", -1.0}}, 0.5, 2}, {"pow_scalar", {{"p", 0.5}}, 0.1, 2},
                     {"erf", {}, -3, 3},          {"sin", {}, -4, 4},          {"cos", {}, -4, 4},
                     {"reciprocal", {}, 0.2, 3}};
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    for (const U& u : unary) {
      for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 5, 7}, {13}, {}, {0, 4}}) {
        Tensor x = Rand(shape, dt, 3, u.lo, u.hi);
        EXPECT_LE(KernelVsReference(u.op, {x}, u.attrs), Tol(dt)) << u.op << " " << DTypeName(dt);
      }
    }
  }
}

TEST(Elementwise, ExactValues) {
  Tensor a = Tensor::FromVector({2, 2}, {1, -2, 3, -4}), b = Tensor::FromVector({2}, {10, 20});
  EXPECT_EQ(Eval("add", {a, b}).ToVector(), (std::vector<double>{11, 18, 13, 16}));
  EXPECT_EQ(Eval("maximum", {a, Tensor::FromVector({}, {0})}).ToVector(), (std::vector<double>{1, 0, 3, 0}));
  EXPECT_EQ(Eval("relu_backward", {b, a}).ToVector(), (std::vector<double>{10, 0, 10, 0}));
  EXPECT_EQ(Eval("abs", {a}).ToVector(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(Eval("pow_scalar", {a}, {{"p", 3.0}}).ToVector(), (std::vector<double>{1, -8, 27, -64}));
}

TEST(Elementwise, StridedInputs) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    Tensor at = Rand({7, 5}, dt).Transpose(0, 1);     // [5, 7] transposed view
    Tensor bn = Rand({5, 12}, dt, 2).Narrow(1, 2, 7);  // [5, 7] with row stride 12
    for (const char* op : kBinary) {
      EXPECT_LE(KernelVsReference(op, {at, bn}), Tol(dt)) << op;
      EXPECT_LE(KernelVsReference(op, {bn, at.Narrow(0, 1, 1)}), Tol(dt)) << op;  // strided + broadcast
    }
    EXPECT_LE(KernelVsReference("exp", {at}), Tol(dt));
    EXPECT_LE(KernelVsReference("tanh", {Rand({3, 4, 5}, dt).Permute(std::vector<int>{2, 0, 1})}), Tol(dt));
  }
}

TEST(Elementwise, LargeTensorsTakeTheParallelPaths) {
  // One long row, many rows, and a broadcast row vector.
  Tensor a = Rand({300000}), b = Rand({300000}, DType::kF32, 2);
  EXPECT_LE(KernelVsReference("mul", {a, b}), 2e-6);
  Tensor m = Rand({512, 129}), row = Rand({129}, DType::kF32, 2), col = Rand({512, 1}, DType::kF32, 3);
  EXPECT_LE(KernelVsReference("add", {m, row}), 2e-6);
  EXPECT_LE(KernelVsReference("div", {m, Rand({512, 1}, DType::kF32, 3, 0.5, 2)}), 2e-6);
  EXPECT_LE(KernelVsReference("sub", {col, row}), 2e-6);  // outer broadcast
  EXPECT_LE(KernelVsReference("sigmoid", {m.Transpose(0, 1)}), 2e-6);
}

TEST(Elementwise, NaNPropagates) {
  Tensor x = Tensor::FromVector({3}, {NAN, 1, -1});
  Tensor y = Tensor::FromVector({3}, {0, NAN, 0});
  auto mx = Eval("maximum", {x, y}).ToVector();
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_EQ(mx[2], 0);
  auto r = Eval("relu", {x}).ToVector();
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[2], 0);
}

TEST(Elementwise, BadInputNamesTheArgument) {
  Tensor a = Rand({2, 3}), out = Tensor::MustEmpty({2, 3}, DType::kF32);
  EXPECT_INVALID(kernels::RunOp("add", {a, Rand({4})}).status(), "add: a [2, 3] and b [4] do not broadcast");
  EXPECT_INVALID(kernels::RunOp("mul", {a, Rand({2, 3}, DType::kF64)}).status(), "mul: b: dtype f64 does not match a");
  EXPECT_INVALID(kernels::RunOp("exp", {Tensor::Zeros({2}, DType::kI32)}).status(),
                 "exp: x: expected a floating dtype");
  EXPECT_INVALID(kernels::RunOp("scale", {a}).status(), "scale: s: missing attribute");
  EXPECT_INVALID(kernels::RunOp("pow_scalar", {a}).status(), "pow_scalar: p: missing attribute");
  EXPECT_INVALID(kernels::RunOp("relu_backward", {Tensor::Zeros({2}, DType::kI64), a}).status(), "relu_backward: dy:");
  EXPECT_INVALID(BinaryKernel(BinaryOp::kAdd, FakeCuda({2, 3}), a, out), "add: a: expected a cpu tensor");
  EXPECT_INVALID(BinaryKernel(BinaryOp::kDiv, a, FakeCuda({2, 3}), out), "div: b: expected a cpu tensor");
  EXPECT_INVALID(UnaryKernel(UnaryOp::kExp, FakeCuda({2, 3}), 0, out), "exp: x: expected a cpu tensor");
  Tensor bad_out = Tensor::MustEmpty({3, 2}, DType::kF32);
  EXPECT_INVALID(UnaryKernel(UnaryOp::kNeg, a, 0, bad_out), "neg: out: expected shape [2, 3]");
  Tensor f16 = Tensor::Zeros({2, 3}, DType::kF16), f16_out = Tensor::MustEmpty({2, 3}, DType::kF16);
  EXPECT_INVALID(UnaryKernel(UnaryOp::kNeg, f16, 0, f16_out),
                 "neg: x: expected dtype f32 or f64 or bf16 or i32 or i64, got f16");
  // The reference takes f16.
  EXPECT_TRUE(UnaryReference(UnaryOp::kNeg, f16, 0, f16_out).ok());
}

TEST(Elementwise, PowBroadcastsAgainstItsReference) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    Tensor a = Rand({3, 5, 7}, dt, 1, 0.1, 3), b = Rand({5, 1}, dt, 2, -2, 2);
    EXPECT_LE(KernelVsReference("pow", {a, b}), Tol(dt)) << DTypeName(dt);
    EXPECT_LE(KernelVsReference("pow", {a.Transpose(0, 2), Rand({}, dt, 3, -2, 2)}), Tol(dt)) << DTypeName(dt);
  }
  // A negative base with whole exponents, as in x ** 2.
  Tensor x = Tensor::FromVector({4}, {-2, -1.5, 0, 3}), e = Tensor::FromVector({}, {3});
  EXPECT_EQ(Eval("pow", {x, e}).ToVector(), (std::vector<double>{-8, -3.375, 0, 27}));
}

TEST(Elementwise, MinimumPropagatesNaN) {
  Tensor x = Tensor::FromVector({3}, {NAN, 1, -1}), y = Tensor::FromVector({3}, {0, NAN, 0});
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference}) {
    auto mn = Eval("minimum", {x, y}, {}, impl).ToVector();
    EXPECT_TRUE(std::isnan(mn[0]));
    EXPECT_TRUE(std::isnan(mn[1]));
    EXPECT_EQ(mn[2], -1);
  }
}

// i64 tensor from exact integer values (FromVector goes through double).
Tensor I64(std::vector<int64_t> shape, std::vector<int64_t> v) {
  Tensor t = Tensor::MustEmpty(shape, DType::kI64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}
std::vector<int64_t> Ints(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i)
    v.push_back(t.dtype() == DType::kI64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i]);
  return v;
}

TEST(Elementwise, IntegerDivisionTruncatesTowardZero) {
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  Tensor a = I64({6}, {7, -7, 7, -7, kMin, 0}), b = I64({6}, {2, 2, -2, -2, -1, -5});
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference}) {
    EXPECT_EQ(Ints(Eval("div", {a, b}, {}, impl)), (std::vector<int64_t>{3, -3, -3, 3, kMin, 0}));
    // i32, broadcast divisor.
    Tensor a32 = Tensor::FromVector({2, 3}, {9, -9, 1, -1, 8, -8}, DType::kI32);
    Tensor b32 = Tensor::FromVector({3}, {4, 4, -3}, DType::kI32);
    EXPECT_EQ(Ints(Eval("div", {a32, b32}, {}, impl)), (std::vector<int64_t>{2, -2, 0, 0, 2, 2}));
  }
}

TEST(Elementwise, IntegerDivisionByZeroNamesTheElement) {
  Tensor a = I64({3}, {1, 2, 3}), b = I64({3}, {1, 0, 2});
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference})
    EXPECT_INVALID(kernels::RunOp("div", {a, b}, {}, impl).status(),
                   "div: b: integer division by zero (element 1 of b [3])");
  // Floating division by zero stays IEEE.
  EXPECT_TRUE(std::isinf(Eval("div", {Tensor::FromVector({1}, {1}), Tensor::FromVector({1}, {0})}).ToVector()[0]));
}

TEST(Elementwise, IntegerArithmeticWrapsAndStaysExact) {
  const int32_t kMax32 = std::numeric_limits<int32_t>::max(), kMin32 = std::numeric_limits<int32_t>::min();
  Tensor a = Tensor::FromVector({3}, {double(kMax32), double(kMin32), 65536}, DType::kI32);
  Tensor one = Tensor::FromVector({}, {1}, DType::kI32);
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable as a double
  Tensor x = I64({2}, {big, -big}), y = I64({2}, {2, 3});
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference}) {
    EXPECT_EQ(Ints(Eval("add", {a, one}, {}, impl)), (std::vector<int64_t>{kMin32, kMin32 + 1, 65537}));
    EXPECT_EQ(Ints(Eval("sub", {a, one}, {}, impl)), (std::vector<int64_t>{kMax32 - 1, kMax32, 65535}));
    EXPECT_EQ(Ints(Eval("mul", {a, a}, {}, impl)), (std::vector<int64_t>{1, 0, 0}));  // mod 2^32
    EXPECT_EQ(Ints(Eval("neg", {a}, {}, impl)), (std::vector<int64_t>{-kMax32, kMin32, -65536}));
    EXPECT_EQ(Ints(Eval("abs", {a}, {}, impl)), (std::vector<int64_t>{kMax32, kMin32, 65536}));
    EXPECT_EQ(Ints(Eval("add", {x, y}, {}, impl)), (std::vector<int64_t>{big + 2, -big + 3}));
    EXPECT_EQ(Ints(Eval("maximum", {x, I64({}, {big - 1})}, {}, impl)), (std::vector<int64_t>{big, big - 1}));
    EXPECT_EQ(Ints(Eval("minimum", {x, I64({}, {big - 1})}, {}, impl)), (std::vector<int64_t>{big - 1, -big}));
  }
}

TEST(Elementwise, IntegerStridedInputs) {
  Tensor a = Tensor::MustEmpty({7, 5}, DType::kI64), b = Tensor::MustEmpty({5, 12}, DType::kI64);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<int64_t>()[i] = 3 * i - 40;
  for (int64_t i = 0; i < b.numel(); ++i) b.data<int64_t>()[i] = (i % 7) + 1;
  Tensor at = a.Transpose(0, 1), bn = b.Narrow(1, 2, 7);
  for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum"})
    EXPECT_EQ(Ints(Eval(op, {at, bn})), Ints(Eval(op, {at, bn}, {}, kernels::Impl::kReference))) << op;
  EXPECT_EQ(Ints(Eval("neg", {at})), Ints(Eval("neg", {at}, {}, kernels::Impl::kReference)));
}

TEST(Elementwise, IntegerDTypeErrors) {
  Tensor i = Tensor::Zeros({2}, DType::kI64);
  EXPECT_INVALID(kernels::RunOp("pow", {i, i}).status(), "pow: a: expected a floating dtype, got i64");
  EXPECT_INVALID(kernels::RunOp("sin", {i}).status(), "sin: x: expected a floating dtype, got i64");
  EXPECT_INVALID(kernels::RunOp("add", {i, Tensor::Zeros({2}, DType::kI32)}).status(),
                 "add: b: dtype i32 does not match a: i64");
  EXPECT_INVALID(kernels::RunOp("add", {Tensor::Zeros({2}, DType::kBool), i}).status(),
                 "add: a: expected a floating, i32 or i64 dtype, got bool");
}

// pow's gradient follows PyTorch at the edges: 0 for d/db where a == 0 and
// b >= 0, 0 for d/da where b == 0, NaN for d/db where a < 0.
TEST(Elementwise, PowGradientAtTheEdgesOfItsDomain) {
  Tensor a = Tensor::FromVector({4}, {0, 0, 2, -2}, DType::kF64), b = Tensor::FromVector({4}, {2, 0, 0, 2}, DType::kF64);
  Tensor g = Tensor::FromVector({4}, {1, 1, 1, 1}, DType::kF64);
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference}) {
    auto grads = kernels::EagerGradients("pow", {a, b}, {g}, {}, impl);
    ASSERT_TRUE(grads.ok()) << grads.status();
    auto da = (*grads)[0].ToVector(), db = (*grads)[1].ToVector();
    EXPECT_EQ(da, (std::vector<double>{0, 0, 0, -4}));
    EXPECT_EQ(db[0], 0);
    EXPECT_EQ(db[1], 0);
    EXPECT_EQ(db[2], std::log(2.0));  // 2^0 * ln 2
    EXPECT_TRUE(std::isnan(db[3]));
  }
}

}  // namespace
}  // namespace loom::kernels::cpu
