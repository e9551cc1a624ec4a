#include "dtensor/local_ops.h"

#include "gtest/gtest.h"

namespace loom::dtensor {
namespace {

TEST(LocalOps, CopyRegionStridedKeepsLargeInt64) {
  Tensor src = Tensor::MustEmpty({3, 4}, DType::kI64);
  int64_t* p = src.data<int64_t>();
  for (int i = 0; i < 12; ++i) p[i] = (int64_t{1} << 60) + i;  // not representable as double
  Tensor dst = Tensor::Zeros({4, 3}, DType::kI64);
  ASSERT_TRUE(CopyRegion(dst, src.Transpose(0, 1)).ok());
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(dst.data<int64_t>()[r * 3 + c], p[c * 4 + r]);
}

TEST(LocalOps, SliceAndPad) {
  Tensor t = Tensor::FromVector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor s = SliceCopy(t, 1, 1, 2);
  EXPECT_EQ(s.ToVector(), (std::vector<double>{2, 3, 5, 6}));
  Tensor z = ZeroPad(s, {3, 3});
  EXPECT_EQ(z.ToVector(), (std::vector<double>{2, 3, 0, 5, 6, 0, 0, 0, 0}));
  Tensor e = SliceCopy(t, 0, 2, 0);
  EXPECT_EQ(e.numel(), 0);
}

TEST(LocalOps, ScaleEveryDType) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    Tensor t = Tensor::FromVector({3}, {3, -6, 9}, dt);
    ScaleInPlace(t, 1, 3);
    EXPECT_EQ(t.ToVector(), (std::vector<double>{1, -2, 3})) << DTypeName(dt);
    ScaleInPlace(t, 4, 1);
    EXPECT_EQ(t.ToVector(), (std::vector<double>{4, -8, 12})) << DTypeName(dt);
  }
  Tensor i = Tensor::FromVector({2}, {7, -7}, DType::kI32);
  ScaleInPlace(i, 1, 2);
  EXPECT_EQ(i.ToVector(), (std::vector<double>{3, -3}));  // truncates toward zero
}

TEST(LocalOps, CopyRegionNamesMismatch) {
  Tensor a = Tensor::Zeros({2}, DType::kF32), b = Tensor::Zeros({3}, DType::kF32);
  absl::Status s = CopyRegion(a, b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("src"), std::string::npos);
}

}  // namespace
}  // namespace loom::dtensor
