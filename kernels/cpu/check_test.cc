// The shared argument checks: messages name the op and the argument.
#include "kernels/cpu/check.h"

#include "gtest/gtest.h"
#include "kernels/cpu/test_util.h"

namespace loom::kernels::cpu {
namespace {

using testing::FakeCuda;

TEST(Check, BroadcastShapes) {
  EXPECT_EQ(*BroadcastShapes("op", "a", Shape{3, 1, 5}, "b", Shape{4, 1}), (Shape{3, 4, 5}));
  EXPECT_EQ(*BroadcastShapes("op", "a", Shape{}, "b", Shape{2}), (Shape{2}));
  EXPECT_EQ(*BroadcastShapes("op", "a", Shape{0, 1}, "b", Shape{1, 3}), (Shape{0, 3}));
  EXPECT_INVALID(BroadcastShapes("op", "a", Shape{2, 3}, "b", Shape{4}).status(),
                 "op: a [2, 3] and b [4] do not broadcast (dim -1: 3 vs 4)");
}

TEST(Check, RankDTypeShape) {
  EXPECT_TRUE(CheckRank("op", "x", Shape{2, 3}, 2).ok());
  EXPECT_INVALID(CheckRank("op", "x", Shape{2}, 2), "op: x: expected at least 2 dims, got 1");
  EXPECT_INVALID(CheckRank("op", "x", Shape{2, 3, 4}, 2, 2), "op: x: expected 2 dims, got 3");
  EXPECT_INVALID(CheckRank("op", "x", Shape{2, 3, 4, 5}, 2, 3), "op: x: expected 2 to 3 dims, got 4");
  EXPECT_TRUE(CheckDType("op", "x", DType::kF32, {DType::kF32, DType::kF64}).ok());
  EXPECT_INVALID(CheckDType("op", "x", DType::kI32, {DType::kF32, DType::kF64}), "op: x: expected dtype f32 or f64, got i32");
  EXPECT_INVALID(CheckSameShape("op", "a", Shape{2}, "b", Shape{3}), "op: b: shape [3] does not match a: [2]");
  EXPECT_INVALID(CheckSameDType("op", "a", DType::kF32, "b", DType::kBF16), "op: b: dtype bf16 does not match a: f32");
  EXPECT_INVALID(CheckFloating("op", "ids", DType::kI64), "op: ids: expected a floating dtype, got i64");
  EXPECT_INVALID(CheckShapeAttr("op", "shape", Shape{2, -3}), "op: shape: negative size -3");
}

TEST(Check, DeviceAndOutput) {
  EXPECT_INVALID(CheckCpu("op", "x", FakeCuda({2})), "op: x: expected a cpu tensor, got one on cuda:0");
  EXPECT_INVALID(CheckCpu("op", "x", Tensor()), "op: x: undefined tensor");
  Tensor t = Tensor::MustEmpty({2, 3}, DType::kF32);
  EXPECT_TRUE(CheckOutput("op", "out", t, DType::kF32, Shape{2, 3}).ok());
  EXPECT_INVALID(CheckOutput("op", "out", t, DType::kF64, Shape{2, 3}), "op: out: expected dtype f64");
  EXPECT_INVALID(CheckOutput("op", "out", t.Transpose(0, 1), DType::kF32, Shape{3, 2}), "op: out: output must be contiguous");
}

TEST(Check, Axes) {
  EXPECT_EQ(*NormalizeAxis("op", "axis", -1, 3), 2);
  EXPECT_INVALID(NormalizeAxis("op", "axis", 3, 3).status(), "op: axis: axis 3 out of range for 3 dims");
  EXPECT_INVALID(NormalizeAxis("op", "axis", -4, 3).status(), "op: axis:");
  EXPECT_EQ(*AxesMask("op", "axes", {}, 2), (std::vector<bool>{true, true}));
  EXPECT_EQ(*AxesMask("op", "axes", {-1}, 3), (std::vector<bool>{false, false, true}));
  EXPECT_INVALID(AxesMask("op", "axes", {0, -3}, 3).status(), "op: axes: axis -3 given twice");
  EXPECT_TRUE(CheckBroadcastableTo("op", "x", Shape{4, 1}, Shape{3, 4, 5}).ok());
  EXPECT_INVALID(CheckBroadcastableTo("op", "x", Shape{4, 2}, Shape{3, 4, 5}), "op: x: shape [4, 2] does not broadcast to [3, 4, 5]");
}

}  // namespace
}  // namespace loom::kernels::cpu
