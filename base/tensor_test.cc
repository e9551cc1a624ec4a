#include "base/tensor.h"

#include <cmath>
#include <cstring>

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

// To() of contiguous tensors converts in typed loops split over the thread
// pool; it must give exactly the element-by-element values of
// SetDouble(i, GetDouble(i)), for every pair of dtypes, on values that
// round (bf16/f16 ties, overflow to inf), NaN and infinities, over enough
// elements (2^19 + 3) that several threads take part.
TEST(Tensor, ContiguousConversionMatchesTheElementPath) {
  const int64_t n = (int64_t{1} << 19) + 3;
  Tensor src = Tensor::MustEmpty({n}, DType::kF64);
  const double special[] = {0.0, -0.0, 1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 65504.0, 65520.0, 1e39, -1e39,
                            1e-40, 3.4e38, std::nan(""), INFINITY, -INFINITY, 2147483647.0, -3.75, 255.5};
  uint64_t x = 88172645463325252ull;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const double r = static_cast<double>(x % 2000001) / 1000.0 - 1000.0;  // [-1000, 1000], 3 decimals
    src.data<double>()[i] = i < 16 ? special[i] : r;
  }
  for (DType from : kAllDTypes) {
    // The source in `from`, through the element path (the reference's own input).
    Tensor a = Tensor::MustEmpty({n}, from);
    for (int64_t i = 0; i < n; ++i) a.SetDouble(i, from == DType::kI32 || from == DType::kI64 || from == DType::kBool
                                                        ? (std::isfinite(src.GetDouble(i)) ? std::trunc(src.GetDouble(i) / 4) : 0)
                                                        : src.GetDouble(i));
    for (DType to : kAllDTypes) {
      if (to == from) continue;
      // Out-of-range float -> int is undefined in C++: an integer target gets
      // the source with those elements (NaN, infinities, 1e39...) set to 0.
      Tensor in = a;
      if (to == DType::kI32 || to == DType::kI64) {
        in = a.Clone();
        for (int64_t i = 0; i < n; ++i)
          if (!(std::fabs(in.GetDouble(i)) < 2e9)) in.SetDouble(i, 0);
      }
      Tensor want = Tensor::MustEmpty({n}, to);
      for (int64_t i = 0; i < n; ++i) want.SetDouble(i, in.GetDouble(i));
      Tensor got = in.To(to);
      ASSERT_EQ(got.dtype(), to);
      ASSERT_EQ(std::memcmp(got.raw_data(), want.raw_data(), got.nbytes()), 0)
          << DTypeName(from) << " -> " << DTypeName(to);
    }
  }
}

TEST(Tensor, ZerosOfEveryByte) {
  Tensor z = Tensor::Zeros({(int64_t{1} << 22) + 5}, DType::kF32);  // 16 MiB + 20 bytes: several memset pieces
  const unsigned char* b = static_cast<const unsigned char*>(z.raw_data());
  int64_t nonzero = 0;
  for (size_t i = 0; i < z.nbytes(); ++i) nonzero += b[i] != 0;
  EXPECT_EQ(nonzero, 0);
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
