#include "base/tensor.h"

#include <cmath>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType t : kAllDTypes) {
    auto parsed = ParseDType(DTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  auto bad = ParseDType("f8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'f8'"), std::string::npos);
}

TEST(DType, HalfConversionsRoundToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1e-5f, 3.0e-7f, 1234.567f}) {
    EXPECT_NEAR(static_cast<float>(F16(f)), f, std::fabs(f) * 1e-3 + 1e-7) << f;
    EXPECT_NEAR(static_cast<float>(BF16(f)), f, std::fabs(f) * 8e-3) << f;
  }
  EXPECT_TRUE(std::isinf(static_cast<float>(F16(1e6f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(F16(NAN))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BF16(NAN))));
  // 1 + 2^-8 is exactly halfway between two bf16 values; ties go to even (1.0).
  EXPECT_EQ(static_cast<float>(BF16(1.0f + 1.0f / 256)), 1.0f);
  // Every f16 bit pattern that is finite survives a float round trip.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    float f = F16::ToFloat(static_cast<uint16_t>(h));
    EXPECT_EQ(F16::FromFloat(f), h) << h;
  }
}

TEST(Device, Parse) {
  EXPECT_EQ(ParseDevice("cpu")->ToString(), "cpu");
  EXPECT_EQ(ParseDevice("cuda:3")->index, 3);
  EXPECT_FALSE(ParseDevice("tpu").ok());
  EXPECT_FALSE(ParseDevice("cuda:-1").ok());
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::FromVector({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor tt = t.Transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_EQ(tt.ToVector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor c = tt.Contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  tt.SetDouble(1, 42);  // writes through to t[1][0]
  EXPECT_EQ(t.GetDouble(3), 42);
  Tensor n = t.Narrow(1, 1, 2);
  EXPECT_EQ(n.ToVector(), (std::vector<double>{1, 2, 4, 5}));
}

TEST(Tensor, ReshapeAndExpandErrorsNameTheProblem) {
  Tensor t = Tensor::Zeros({4, 6}, DType::kF32);
  auto r = t.Reshape({-1, 8});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (Shape{3, 8}));
  auto bad = t.Reshape({5, 5});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("24 elements"), std::string::npos);
  EXPECT_FALSE(t.Transpose(0, 1).Reshape({24}).ok());
  Tensor row = Tensor::FromVector({1, 3}, {1, 2, 3});
  auto e = row.Expand({2, 3});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->ToVector(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_FALSE(row.Expand({2, 4}).ok());
  EXPECT_FALSE(Tensor::Empty({2, -1}, DType::kF32).ok());
}

TEST(Tensor, DTypeConversionAndRelativeError) {
  Tensor t = Tensor::FromVector({3}, {1.5, -2, 3}, DType::kF64);
  Tensor h = t.To(DType::kBF16);
  EXPECT_EQ(h.dtype(), DType::kBF16);
  EXPECT_EQ(h.ToVector(), t.ToVector());
  EXPECT_EQ(RelativeError(h, t), 0);
  Tensor u = Tensor::FromVector({3}, {1.5, -2, 4}, DType::kF64);
  EXPECT_NEAR(RelativeError(u, t), 1.0 / std::sqrt(1.5 * 1.5 + 4 + 9), 1e-12);
}

TEST(Allocator, CountingAllocatorCounts) {
  CountingAllocator counting(CpuAllocator::Get());
  {
    ScopedDefaultAllocator use(&counting);
    Tensor a = Tensor::Zeros({16}, DType::kF32);
    Tensor b = a.Transpose(0, 0);  // a view: no allocation
    EXPECT_EQ(counting.stats().allocations, 1);
    EXPECT_EQ(counting.stats().bytes_in_use, 64);
  }
  EXPECT_EQ(counting.stats().frees, 1);
  EXPECT_EQ(counting.stats().bytes_in_use, 0);
  EXPECT_EQ(counting.stats().peak_bytes, 64);
  Tensor c = Tensor::Zeros({16}, DType::kF32);  // default restored
  EXPECT_EQ(counting.stats().allocations, 1);
  auto p = reinterpret_cast<uintptr_t>(c.raw_data());
  EXPECT_EQ(p % CpuAllocator::kAlignment, 0u);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {
TEST(Tensor, DefaultIsUndefined) {
  EXPECT_FALSE(Tensor().defined());
  EXPECT_TRUE(Tensor::Zeros({0}, DType::kF32).defined());
}
}  // namespace
}  // namespace loom
