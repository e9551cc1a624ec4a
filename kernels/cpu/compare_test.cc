// Comparisons, logical ops and where: exact values, broadcasting of all three
// where operands, NaN, i64 beyond 2^53, strided views, where's gradient, and
// errors that name the argument.
#include "kernels/cpu/compare.h"

#include <cmath>
#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/cpu/test_util.h"

namespace loom::kernels::cpu {
namespace {

using testing::Eval;
using testing::Rand;

const kernels::Impl kImpls[] = {kernels::Impl::kKernel, kernels::Impl::kReference};

Tensor Bools(std::vector<int64_t> shape, std::vector<double> v) { return Tensor::FromVector(shape, v, DType::kBool); }

TEST(Compare, ExactValuesWithBroadcastAndNaN) {
  Tensor a = Tensor::FromVector({2, 3}, {1, 2, NAN, -1, 5, 2});
  Tensor b = Tensor::FromVector({3}, {1, 3, NAN});
  for (auto impl : kImpls) {
    EXPECT_EQ(Eval("equal", {a, b}, {}, impl).ToVector(), (std::vector<double>{1, 0, 0, 0, 0, 0}));
    EXPECT_EQ(Eval("less", {a, b}, {}, impl).ToVector(), (std::vector<double>{0, 1, 0, 1, 0, 0}));
    EXPECT_EQ(Eval("less_equal", {a, b}, {}, impl).ToVector(), (std::vector<double>{1, 1, 0, 1, 0, 0}));
    EXPECT_EQ(Eval("greater", {a, b}, {}, impl).ToVector(), (std::vector<double>{0, 0, 0, 0, 1, 0}));
    EXPECT_EQ(Eval("greater_equal", {a, b}, {}, impl).ToVector(), (std::vector<double>{1, 0, 0, 0, 1, 0}));
    EXPECT_EQ(Eval("equal", {a, b}, {}, impl).dtype(), DType::kBool);
  }
}

TEST(Compare, IntegersCompareExactlyBeyondDoublePrecision) {
  // 2^53 + 1 and 2^53 are the same double; as i64 they differ.
  Tensor a = Tensor::MustEmpty({2}, DType::kI64), b = Tensor::MustEmpty({}, DType::kI64);
  a.data<int64_t>()[0] = (int64_t{1} << 53) + 1;
  a.data<int64_t>()[1] = int64_t{1} << 53;
  b.data<int64_t>()[0] = int64_t{1} << 53;
  for (auto impl : kImpls) {
    EXPECT_EQ(Eval("greater", {a, b}, {}, impl).ToVector(), (std::vector<double>{1, 0}));
    EXPECT_EQ(Eval("equal", {a, b}, {}, impl).ToVector(), (std::vector<double>{0, 1}));
  }
}

TEST(Compare, LogicalOps) {
  Tensor a = Bools({2, 2}, {0, 0, 1, 1}), b = Bools({2}, {0, 1});
  for (auto impl : kImpls) {
    EXPECT_EQ(Eval("logical_and", {a, b}, {}, impl).ToVector(), (std::vector<double>{0, 0, 0, 1}));
    EXPECT_EQ(Eval("logical_or", {a, b}, {}, impl).ToVector(), (std::vector<double>{0, 1, 1, 1}));
    EXPECT_EQ(Eval("logical_not", {a}, {}, impl).ToVector(), (std::vector<double>{1, 1, 0, 0}));
    EXPECT_EQ(Eval("equal", {a, b}, {}, impl).ToVector(), (std::vector<double>{1, 0, 0, 1}));
  }
}

TEST(Compare, WhereBroadcastsAllThreeOperands) {
  // cond [2, 1, 3], a [4, 1], b [3] -> out [2, 4, 3].
  Tensor cond = Bools({2, 1, 3}, {1, 0, 1, 0, 0, 1});
  Tensor a = Tensor::FromVector({4, 1}, {10, 20, 30, 40});
  Tensor b = Tensor::FromVector({3}, {-1, -2, -3});
  for (auto impl : kImpls) {
    Tensor out = Eval("where", {cond, a, b}, {}, impl);
    ASSERT_EQ(out.shape(), (Shape{2, 4, 3}));
    std::vector<double> want;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 3; ++k) want.push_back(cond.GetDouble(i * 3 + k) != 0 ? a.GetDouble(j) : b.GetDouble(k));
    EXPECT_EQ(out.ToVector(), want);
  }
}

TEST(Compare, WhereTakesAnyDTypeAndStridedViews) {
  Tensor cond = Bools({3, 2}, {1, 0, 0, 1, 1, 1}).Transpose(0, 1);  // [2, 3] view
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kBool}) {
    Tensor a = Tensor::FromVector({2, 3}, {1, 0, 3, 0, 5, 6}, dt), b = Tensor::FromVector({3}, {7, 1, 0}, dt);
    Tensor k = Eval("where", {cond, a, b}), r = Eval("where", {cond, a, b}, {}, kernels::Impl::kReference);
    EXPECT_EQ(k.dtype(), dt);
    EXPECT_EQ(k.ToVector(), r.ToVector()) << DTypeName(dt);
    // cond^T = [[1, 0, 1], [0, 1, 1]]
    std::vector<double> want = {1, 1, 3, 7, 5, 6};
    if (dt == DType::kBool) want = {1, 1, 1, 1, 1, 1};
    EXPECT_EQ(k.ToVector(), want) << DTypeName(dt);
  }
}

TEST(Compare, WhereGradientGoesToTheChosenSide) {
  Tensor cond = Bools({2, 3}, {1, 0, 1, 0, 0, 1});
  Tensor a = Tensor::FromVector({3}, {1, 2, 3}, DType::kF64), b = Tensor::FromVector({2, 1}, {4, 5}, DType::kF64);
  Tensor g = Tensor::FromVector({2, 3}, {1, 2, 3, 4, 5, 6}, DType::kF64);
  for (auto impl : kImpls) {
    auto grads = kernels::EagerGradients("where", {cond, a, b}, {g}, {}, impl);
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_FALSE((*grads)[0].defined());
    EXPECT_EQ((*grads)[1].ToVector(), (std::vector<double>{1, 0, 9}));  // sum_to [3]
    EXPECT_EQ((*grads)[2].ToVector(), (std::vector<double>{2, 9}));     // sum_to [2, 1]
  }
}

TEST(Compare, LargeInputsTakeTheParallelPath) {
  Tensor a = Rand({512, 129}), b = Rand({129}, DType::kF32, 2);
  Tensor k = Eval("less", {a, b}), r = Eval("less", {a, b}, {}, kernels::Impl::kReference);
  EXPECT_EQ(k.ToVector(), r.ToVector());
  Tensor w = Eval("where", {k, a, b}), wr = Eval("where", {k, a, b}, {}, kernels::Impl::kReference);
  EXPECT_EQ(w.ToVector(), wr.ToVector());
}

TEST(Compare, BadInputNamesTheArgument) {
  Tensor f = Rand({2, 3}), i = Tensor::Zeros({2, 3}, DType::kI64), c = Tensor::Zeros({2, 3}, DType::kBool);
  EXPECT_INVALID(kernels::RunOp("where", {f, f, f}).status(), "where: cond: expected dtype bool, got f32");
  EXPECT_INVALID(kernels::RunOp("where", {c, f, i}).status(), "where: b: dtype i64 does not match a: f32");
  EXPECT_INVALID(kernels::RunOp("where", {c, f, Rand({4})}).status(), "where:");
  EXPECT_INVALID(kernels::RunOp("less", {f, i}).status(), "less: b: dtype i64 does not match a: f32");
  EXPECT_INVALID(kernels::RunOp("less", {c, c}).status(), "less: a: expected a floating, i32 or i64 dtype, got bool");
  EXPECT_INVALID(kernels::RunOp("logical_and", {f, c}).status(), "logical_and: a: expected dtype bool, got f32");
  EXPECT_INVALID(kernels::RunOp("logical_not", {i}).status(), "logical_not: x: expected dtype bool, got i64");
  EXPECT_INVALID(kernels::RunOp("equal", {f, Rand({4})}).status(), "equal: a [2, 3] and b [4] do not broadcast");
}

}  // namespace
}  // namespace loom::kernels::cpu
