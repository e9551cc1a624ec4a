// ReduceInto: the vectorised paths agree bit for bit with the scalar
// per-element definition (bf16/f16 against ReduceHalfScalarForTest, other
// dtypes against a plain loop), over odd lengths and special values (NaN
// results must be NaN; which payload survives is the compiler's choice).
#include "collectives/algorithms/reduce.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace loom::collectives::algorithms {
namespace {

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                         ReduceOp::kProduct};

// Random 16-bit patterns, with every special class (zeros, subnormals, inf,
// NaN, ties near rounding) represented.
std::vector<uint16_t> HalfBits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x7c00, 0xfc00, 0x7e00,
                              0x7c01, 0xffff, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3c00};
  for (size_t i = 0; i < n; ++i) {
    v[i] = (rng() % 8 == 0) ? special[rng() % (sizeof(special) / 2)] : static_cast<uint16_t>(rng());
  }
  return v;
}

bool IsNaN(DType dt, uint16_t h) {
  return dt == DType::kBF16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
}

TEST(ReduceInto, HalfVectorMatchesScalar) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (ReduceOp op : kOps) {
      for (size_t n : {0, 1, 7, 8, 9, 31, 1000, 4099}) {
        std::vector<uint16_t> a = HalfBits(n, 1 + n), b = HalfBits(n, 7 * n + 3);
        std::vector<uint16_t> want = a, got = a;
        ReduceHalfScalarForTest(dt, op, want.data(), b.data(), n);
        ReduceInto(dt, op, got.data(), b.data(), n);
        for (size_t i = 0; i < n; ++i) {
          // Which NaN payload survives x op y is up to the compiler (it may
          // commute the operands): any NaN matches any NaN.
          if (IsNaN(dt, got[i]) && IsNaN(dt, want[i])) continue;
          ASSERT_EQ(got[i], want[i]) << DTypeName(dt) << " " << ReduceOpName(op) << " n=" << n
                                     << " i=" << i << " a=" << a[i] << " b=" << b[i];
        }
      }
    }
  }
}

template <typename T>
void CheckPlain(DType dt) {
  std::mt19937 rng(42);
  for (ReduceOp op : kOps) {
    for (size_t n : {0, 1, 5, 8, 17, 1023}) {
      std::vector<T> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = static_cast<T>(static_cast<int>(rng() % 200) - 100);
        b[i] = static_cast<T>(static_cast<int>(rng() % 200) - 100);
      }
      if (std::is_floating_point_v<T> && n > 3) {
        a[0] = std::numeric_limits<T>::quiet_NaN();
        b[1] = std::numeric_limits<T>::quiet_NaN();
        a[2] = T(-0.0);
        b[2] = T(0.0);
      }
      std::vector<T> got = a;
      ReduceInto(dt, op, got.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) {
        T x = a[i], y = b[i], want;
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg: want = static_cast<T>(x + y); break;
          case ReduceOp::kProduct: want = static_cast<T>(x * y); break;
          case ReduceOp::kMin: want = y < x ? y : x; break;
          default: want = y > x ? y : x; break;
        }
        if (std::is_floating_point_v<T> && std::isnan(static_cast<double>(got[i])) &&
            std::isnan(static_cast<double>(want))) {
          continue;
        }
        ASSERT_EQ(std::memcmp(&got[i], &want, sizeof(T)), 0)
            << DTypeName(dt) << " " << ReduceOpName(op) << " i=" << i;
      }
    }
  }
}

TEST(ReduceInto, PlainTypesMatchScalar) {
  CheckPlain<float>(DType::kF32);
  CheckPlain<double>(DType::kF64);
  CheckPlain<int32_t>(DType::kI32);
  CheckPlain<int64_t>(DType::kI64);
}

}  // namespace
}  // namespace loom::collectives::algorithms
