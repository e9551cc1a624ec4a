// sum / mean / max / min / sum_to kernels vs references: every axis subset of
// a 4-d tensor, keepdim, strided inputs, the parallel row/column paths, NaN,
// integer reductions (exact, wrapping sums), errors.
#include "kernels/cpu/reduce.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/test_util.h"

namespace loom::kernels::cpu {
namespace {

using testing::Eval;
using testing::FakeCuda;
using testing::KernelVsReference;
using testing::Rand;
using testing::Tol;
using Ints = std::vector<int64_t>;

TEST(Reduce, EveryAxisSubsetOf4D) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    Tensor x = Rand({3, 4, 5, 2}, dt);
    for (int bits = 0; bits < 16; ++bits) {
      Ints axes;
      for (int d = 0; d < 4; ++d)
        if (bits & (1 << d)) axes.push_back(d % 2 ? d - 4 : d);  // mix negative axes in
      for (bool keep : {false, true}) {
        for (const char* op : {"sum", "mean", "max", "min"}) {
          kernels::Attrs attrs{{"axes", axes}, {"keepdim", keep}};
          EXPECT_LE(KernelVsReference(op, {x}, attrs), Tol(dt)) << op << " bits=" << bits << " keep=" << keep;
        }
      }
    }
  }
}

TEST(Reduce, ShapesAndExactValues) {
  Tensor x = Tensor::FromVector({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(Eval("sum", {x}).ToVector(), (std::vector<double>{21}));
  EXPECT_EQ(Eval("sum", {x}).shape(), Shape{});
  Tensor s0 = Eval("sum", {x}, {{"axes", Ints{0}}});
  EXPECT_EQ(s0.shape(), (Shape{3}));
  EXPECT_EQ(s0.ToVector(), (std::vector<double>{5, 7, 9}));
  Tensor m1 = Eval("mean", {x}, {{"axes", Ints{-1}}, {"keepdim", true}});
  EXPECT_EQ(m1.shape(), (Shape{2, 1}));
  EXPECT_EQ(m1.ToVector(), (std::vector<double>{2, 5}));
  EXPECT_EQ(Eval("max", {x}, {{"axes", Ints{0}}}).ToVector(), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(Eval("max", {x}, {{"axes", int64_t{0}}}).ToVector(), (std::vector<double>{4, 5, 6}));  // a single int
  Tensor st = Eval("sum_to", {x}, {{"shape", Ints{1, 3}}});
  EXPECT_EQ(st.shape(), (Shape{1, 3}));
  EXPECT_EQ(st.ToVector(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(Eval("sum_to", {x}, {{"shape", Ints{2, 1}}}).ToVector(), (std::vector<double>{6, 15}));
  EXPECT_EQ(Eval("sum", {Tensor::Zeros({0, 3}, DType::kF32)}, {{"axes", Ints{0}}}).ToVector(),
            (std::vector<double>{0, 0, 0}));
}

TEST(Reduce, StridedInputs) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    Tensor xt = Rand({6, 7, 5}, dt).Permute(std::vector<int>{2, 0, 1});
    Tensor xn = Rand({4, 9}, dt).Narrow(1, 2, 5);
    for (const char* op : {"sum", "mean", "max", "min"}) {
      EXPECT_LE(KernelVsReference(op, {xt}, {{"axes", Ints{-1}}}), Tol(dt)) << op;
      EXPECT_LE(KernelVsReference(op, {xt}, {{"axes", Ints{0, 2}}}), Tol(dt)) << op;
      EXPECT_LE(KernelVsReference(op, {xn}, {{"axes", Ints{0}}}), Tol(dt)) << op;
    }
    EXPECT_LE(KernelVsReference("sum_to", {xt}, {{"shape", Ints{6, 1}}}), Tol(dt));
  }
}

TEST(Reduce, LargeRowsAndColumns) {
  Tensor x = Rand({300, 517});
  for (const char* op : {"sum", "mean", "max", "min"}) {
    EXPECT_LE(KernelVsReference(op, {x}, {{"axes", Ints{1}}}), 1e-6) << op;
    EXPECT_LE(KernelVsReference(op, {x}, {{"axes", Ints{0}}}), 1e-6) << op;
    EXPECT_LE(KernelVsReference(op, {x}), 1e-6) << op;
  }
  EXPECT_LE(KernelVsReference("sum_to", {Rand({8, 64, 300})}, {{"shape", Ints{300}}}), 1e-6);
  // A few very long rows: the chunked parallel path.
  Tensor longrows = Rand({2, 300000});
  for (const char* op : {"sum", "mean", "max", "min"}) {
    EXPECT_LE(KernelVsReference(op, {longrows}, {{"axes", Ints{1}}}), 1e-6) << op;
    EXPECT_LE(KernelVsReference(op, {longrows}), 1e-6) << op;
  }
}

TEST(Reduce, F32SumAccumulatesInDouble) {
  // 2^24 + many ones would stall a float accumulator.
  Tensor x = Tensor::MustEmpty({1 << 20}, DType::kF32);
  x.Fill(1.0);
  x.SetDouble(0, 16777216.0);
  EXPECT_NEAR(Eval("sum", {x}).GetDouble(0), 16777216.0 + (1 << 20) - 1, 2.0);  // f32 output spacing is 2
}

TEST(Reduce, MaxPropagatesNaN) {
  Tensor x = Tensor::FromVector({2, 3}, {1, NAN, 3, 4, 5, 6});
  auto rows = Eval("max", {x}, {{"axes", Ints{1}}}).ToVector();
  EXPECT_TRUE(std::isnan(rows[0]));
  EXPECT_EQ(rows[1], 6);
  auto cols = Eval("max", {x}, {{"axes", Ints{0}}}).ToVector();
  EXPECT_TRUE(std::isnan(cols[1]));
}

TEST(Reduce, MinValuesAndNaN) {
  Tensor x = Tensor::FromVector({2, 3}, {4, NAN, -3, 1, 5, 6});
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference}) {
    auto rows = Eval("min", {x}, {{"axes", Ints{-1}}, {"keepdim", true}}, impl);
    EXPECT_EQ(rows.shape(), (Shape{2, 1}));
    EXPECT_TRUE(std::isnan(rows.ToVector()[0]));
    EXPECT_EQ(rows.ToVector()[1], 1);
    auto cols = Eval("min", {x}, {{"axes", Ints{0}}}, impl).ToVector();
    EXPECT_EQ(cols[0], 1);
    EXPECT_TRUE(std::isnan(cols[1]));
    EXPECT_EQ(cols[2], -3);
  }
}

// Ties of min each get the full gradient, like max.
TEST(Reduce, MinGradientGoesToEveryTiedMinimum) {
  Tensor x = Tensor::FromVector({2, 3}, {2, 1, 1, 0, 3, 4}, DType::kF64);
  Tensor g = Tensor::FromVector({2}, {10, 20}, DType::kF64);
  auto grads = kernels::EagerGradients("min", {x}, {g}, {{"axes", Ints{1}}});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0].ToVector(), (std::vector<double>{0, 10, 10, 20, 0, 0}));
}

TEST(Reduce, IntegerReductionsAreExactAndSumsWrap) {
  const int64_t big = (int64_t{1} << 60) + 1;  // odd and beyond 2^53
  Tensor x = Tensor::MustEmpty({2, 3}, DType::kI64);
  const int64_t v[] = {big, 2, -5, -big, 7, 3};
  for (int i = 0; i < 6; ++i) x.data<int64_t>()[i] = v[i];
  const int32_t kMax32 = std::numeric_limits<int32_t>::max();
  Tensor y = Tensor::FromVector({3}, {double(kMax32), 1, 1}, DType::kI32);
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference}) {
    Tensor s = Eval("sum", {x}, {{"axes", Ints{1}}}, impl);
    EXPECT_EQ(s.dtype(), DType::kI64);
    EXPECT_EQ(s.data<int64_t>()[0], big - 3);
    EXPECT_EQ(s.data<int64_t>()[1], -big + 10);
    Tensor mx = Eval("max", {x}, {{"axes", Ints{0}}}, impl), mn = Eval("min", {x}, {{"axes", Ints{-2}}}, impl);
    EXPECT_EQ(mx.data<int64_t>()[0], big);
    EXPECT_EQ(mn.data<int64_t>()[0], -big);
    EXPECT_EQ(mn.data<int64_t>()[2], -5);
    EXPECT_EQ(Eval("sum", {y}, {}, impl).data<int32_t>()[0], std::numeric_limits<int32_t>::min() + 1);  // wraps
  }
  // Every axis subset of a strided 3-d i32 tensor, kernel against reference.
  Tensor z = Tensor::MustEmpty({5, 4, 3}, DType::kI32);
  for (int64_t i = 0; i < z.numel(); ++i) z.data<int32_t>()[i] = static_cast<int32_t>((i * 37) % 101 - 50);
  Tensor zt = z.Permute(std::vector<int>{2, 0, 1});
  for (int bits = 0; bits < 8; ++bits) {
    Ints axes;
    for (int d = 0; d < 3; ++d)
      if (bits & (1 << d)) axes.push_back(d - 3);
    for (const char* op : {"sum", "max", "min"})
      EXPECT_EQ(KernelVsReference(op, {zt}, {{"axes", axes}, {"keepdim", bits % 2 == 1}}), 0) << op << " " << bits;
  }
}

TEST(Reduce, BadInputNamesTheArgument) {
  Tensor x = Rand({2, 3});
  EXPECT_INVALID(kernels::RunOp("sum", {x}, {{"axes", Ints{2}}}).status(), "sum: axes: axis 2 out of range for 2 dims");
  EXPECT_INVALID(kernels::RunOp("mean", {x}, {{"axes", Ints{1, -1}}}).status(), "mean: axes: axis -1 given twice");
  EXPECT_INVALID(kernels::RunOp("max", {Rand({0, 3})}, {{"axes", Ints{0}}}).status(), "max: x: cannot take the max");
  EXPECT_INVALID(kernels::RunOp("mean", {Tensor::Zeros({2}, DType::kI64)}).status(), "mean: x: expected a floating");
  EXPECT_INVALID(kernels::RunOp("sum", {Tensor::Zeros({2}, DType::kBool)}).status(),
                 "sum: x: expected a floating, i32 or i64 dtype, got bool");
  EXPECT_INVALID(kernels::RunOp("min", {Rand({0, 3})}, {{"axes", Ints{0}}}).status(), "min: x: cannot take the min");
  EXPECT_INVALID(kernels::RunOp("sum_to", {x}, {{"shape", Ints{4}}}).status(), "sum_to: shape: [4] does not broadcast");
  EXPECT_INVALID(kernels::RunOp("sum_to", {x}, {{"shape", Ints{1, 2, 3}}}).status(), "sum_to: shape:");
  EXPECT_INVALID(kernels::RunOp("sum_to", {x}).status(), "sum_to: shape: missing attribute");
  EXPECT_INVALID(kernels::RunOp("sum", {x}, {{"axes", 1.5}}).status(), "sum: axes: expected a list of ints");
  Tensor out = Tensor::MustEmpty({2}, DType::kF32);
  std::vector<bool> mask = {false, true};
  EXPECT_INVALID(ReduceKernel(ReduceOp::kSum, FakeCuda({2, 3}), mask, out), "sum: x: expected a cpu tensor");
  Tensor bad = Tensor::MustEmpty({3}, DType::kF32);
  EXPECT_INVALID(ReduceKernel(ReduceOp::kSum, x, mask, bad), "sum: out:");
}

}  // namespace
}  // namespace loom::kernels::cpu
