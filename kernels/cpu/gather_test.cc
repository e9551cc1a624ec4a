// gather / gather_backward: ONNX Gather's examples, negative indices, scalar
// and 2-d indices, any data dtype, strided inputs, out-of-range indices (an
// error naming the index, never a read outside x), the deterministic
// scatter-add with repeated indices, and bad arguments.
#include "kernels/cpu/gather.h"

#include "gtest/gtest.h"
#include "kernels/cpu/test_util.h"

namespace loom::kernels::cpu {
namespace {

using testing::Eval;
using testing::KernelVsReference;
using testing::Rand;

const kernels::Impl kImpls[] = {kernels::Impl::kKernel, kernels::Impl::kReference};
kernels::Attrs Axis(int64_t a) { return kernels::Attrs{{"axis", a}}; }
Tensor I64(std::vector<int64_t> shape, std::vector<double> v) { return Tensor::FromVector(shape, v, DType::kI64); }

// The two examples of ONNX's Gather documentation.
TEST(Gather, OnnxExamples) {
  Tensor data = Tensor::FromVector({3, 2}, {1.0, 1.2, 2.3, 3.4, 4.5, 5.7});
  Tensor data3 = Tensor::FromVector({3, 3}, {1.0, 1.2, 1.9, 2.3, 3.4, 3.9, 4.5, 5.7, 5.9});
  for (auto impl : kImpls) {
    Tensor a0 = Eval("gather", {data, I64({2, 2}, {0, 1, 1, 2})}, Axis(0), impl);
    EXPECT_EQ(a0.shape(), (Shape{2, 2, 2}));
    EXPECT_EQ(a0.ToVector(), Tensor::FromVector({8}, {1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7}).ToVector());
    Tensor a1 = Eval("gather", {data3, I64({1, 2}, {0, 2})}, Axis(1), impl);
    EXPECT_EQ(a1.shape(), (Shape{3, 1, 2}));
    EXPECT_EQ(a1.ToVector(), Tensor::FromVector({6}, {1.0, 1.9, 2.3, 3.9, 4.5, 5.9}).ToVector());
  }
}

TEST(Gather, NegativeAndScalarIndices) {
  Tensor x = Tensor::FromVector({2, 4}, {0, 1, 2, 3, 10, 11, 12, 13});
  for (auto impl : kImpls) {
    EXPECT_EQ(Eval("gather", {x, I64({3}, {-1, 0, -4})}, Axis(1), impl).ToVector(),
              (std::vector<double>{3, 0, 0, 13, 10, 10}));
    Tensor s = Eval("gather", {x, I64({}, {-1})}, Axis(0), impl);  // a scalar index drops the axis
    EXPECT_EQ(s.shape(), (Shape{4}));
    EXPECT_EQ(s.ToVector(), (std::vector<double>{10, 11, 12, 13}));
    Tensor i32 = Tensor::FromVector({2}, {2, -3}, DType::kI32);
    EXPECT_EQ(Eval("gather", {x, i32}, Axis(-1), impl).ToVector(), (std::vector<double>{2, 1, 12, 11}));
  }
}

TEST(Gather, AnyDTypeAndStridedViews) {
  Tensor idx = I64({2, 3}, {3, -1, 0, 2, 2, -4});  // valid for dims of 4 and 5
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kBool}) {
    Tensor x = Tensor::MustEmpty({3, 5, 4}, dt);
    for (int64_t i = 0; i < x.numel(); ++i) x.SetDouble(i, static_cast<double>(i % 7));
    for (int64_t axis : {0, 1, 2}) {
      Tensor in = axis == 0 ? x.Permute(std::vector<int>{1, 0, 2}) : x;  // [5, 3, 4] strided for axis 0
      EXPECT_EQ(KernelVsReference("gather", {in, idx}, Axis(axis)), 0) << DTypeName(dt) << " axis " << axis;
    }
    EXPECT_EQ(KernelVsReference("gather", {x, idx.Transpose(0, 1)}, Axis(1)), 0) << DTypeName(dt);
  }
}

TEST(Gather, OutOfRangeIndexIsAnErrorNamingIt) {
  Tensor x = Rand({2, 5});
  for (auto impl : kImpls) {
    EXPECT_INVALID(kernels::RunOp("gather", {x, I64({3}, {0, 5, 1})}, Axis(1), impl).status(),
                   "gather: indices: index 5 at position 1 is out of range [-5, 5)");
    EXPECT_INVALID(kernels::RunOp("gather", {x, I64({2}, {-3, 0})}, Axis(0), impl).status(),
                   "index -3 at position 0 is out of range [-2, 2)");
    EXPECT_INVALID(kernels::RunOp("gather_backward", {Rand({2, 3}), I64({3}, {0, 4, 1})},
                                  {{"axis", int64_t{1}}, {"dim_size", int64_t{4}}}, impl)
                       .status(),
                   "gather_backward: indices: index 4 at position 1 is out of range [-4, 4)");
  }
}

TEST(GatherBackward, RepeatedIndicesAccumulateInOrder) {
  Tensor dy = Tensor::FromVector({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}, DType::kF64);
  Tensor idx = I64({4}, {2, -1, 0, 2});  // -1 is 2 as well
  kernels::Attrs a{{"axis", int64_t{1}}, {"dim_size", int64_t{3}}};
  for (auto impl : kImpls) {
    Tensor dx = Eval("gather_backward", {dy, idx}, a, impl);
    EXPECT_EQ(dx.shape(), (Shape{2, 3}));
    EXPECT_EQ(dx.ToVector(), (std::vector<double>{3, 0, 7, 7, 0, 19}));
  }
}

TEST(GatherBackward, MatchesTheReferenceOnLargeInputsAndIsDeterministic) {
  // Many repeated rows into a small table, outer > 1 and a wide inner dim: the
  // parallel column blocks.
  Tensor dy = Rand({3, 600, 1500}, DType::kF32, 4);
  Tensor idx = Tensor::MustEmpty({600}, DType::kI64);
  for (int64_t j = 0; j < 600; ++j) idx.data<int64_t>()[j] = (j * 7) % 11 - 5;
  kernels::Attrs a{{"axis", int64_t{1}}, {"dim_size", int64_t{11}}};
  Tensor k1 = Eval("gather_backward", {dy, idx}, a), k2 = Eval("gather_backward", {dy, idx}, a);
  EXPECT_EQ(k1.ToVector(), k2.ToVector());
  Tensor r = Eval("gather_backward", {dy, idx}, a, kernels::Impl::kReference);
  EXPECT_LE(RelativeError(k1, r), 1e-6);
}

TEST(Gather, GradientIsTheScatterAdd) {
  Tensor x = Rand({4, 3}, DType::kF64), idx = I64({5}, {0, 3, 3, -1, 1});
  Tensor g = Rand({5, 3}, DType::kF64, 2);
  for (auto impl : kImpls) {
    auto grads = kernels::EagerGradients("gather", {x, idx}, {g}, Axis(0), impl);
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_FALSE((*grads)[1].defined());
    const Tensor& dx = (*grads)[0];
    for (int c = 0; c < 3; ++c) {
      EXPECT_DOUBLE_EQ(dx.GetDouble(0 * 3 + c), g.GetDouble(0 * 3 + c));
      EXPECT_DOUBLE_EQ(dx.GetDouble(1 * 3 + c), g.GetDouble(4 * 3 + c));
      EXPECT_DOUBLE_EQ(dx.GetDouble(2 * 3 + c), 0);
      EXPECT_NEAR(dx.GetDouble(3 * 3 + c), g.GetDouble(1 * 3 + c) + g.GetDouble(2 * 3 + c) + g.GetDouble(3 * 3 + c),
                  1e-15);
    }
  }
}

TEST(Gather, BadArgumentsNameTheField) {
  Tensor x = Rand({2, 5});
  EXPECT_INVALID(kernels::RunOp("gather", {x, Rand({3})}).status(),
                 "gather: indices: expected dtype i32 or i64, got f32");
  EXPECT_INVALID(kernels::RunOp("gather", {x, I64({1}, {0})}, Axis(2)).status(), "gather: axis:");
  EXPECT_INVALID(kernels::RunOp("gather", {Rand({}), I64({1}, {0})}).status(), "gather: x: expected at least 1 dims");
  EXPECT_INVALID(kernels::RunOp("gather_backward", {Rand({2, 3}), I64({3}, {0, 1, 2})}, Axis(1)).status(),
                 "gather_backward: dim_size: missing attribute");
  EXPECT_INVALID(kernels::RunOp("gather_backward", {Rand({2, 3}), I64({4}, {0, 1, 2, 0})},
                                {{"axis", int64_t{1}}, {"dim_size", int64_t{3}}})
                     .status(),
                 "gather_backward: dy: dims [1, 2) of [2, 3] do not match indices [4]");
  EXPECT_INVALID(kernels::RunOp("gather_backward", {Tensor::Zeros({2, 3}, DType::kI64), I64({3}, {0, 1, 2})},
                                {{"axis", int64_t{1}}, {"dim_size", int64_t{3}}})
                     .status(),
                 "gather_backward: dy: expected a floating dtype");
}

}  // namespace
}  // namespace loom::kernels::cpu
