#include "collectives/algorithms/reduce.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace loom::collectives {
namespace {

template <typename T, typename F>
void Apply(void* acc, const void* in, size_t n, F f) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) a[i] = f(a[i], b[i]);
}

template <typename T>
void ReduceTyped(ReduceOp op, void* acc, const void* in, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return Apply<T>(acc, in, n, [](T x, T y) { return static_cast<T>(x + y); });
    case ReduceOp::kProduct:
      return Apply<T>(acc, in, n, [](T x, T y) { return static_cast<T>(x * y); });
    case ReduceOp::kMin:
      return Apply<T>(acc, in, n, [](T x, T y) { return y < x ? y : x; });
    case ReduceOp::kMax:
      return Apply<T>(acc, in, n, [](T x, T y) { return y > x ? y : x; });
  }
}

template <typename H>  // BF16 or F16: reduce in float, round per step
void ReduceHalf(ReduceOp op, void* acc, const void* in, size_t n) {
  H* a = static_cast<H*>(acc);
  const H* b = static_cast<const H*>(in);
  for (size_t i = 0; i < n; ++i) {
    float x = a[i], y = b[i], r;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: r = x + y; break;
      case ReduceOp::kProduct: r = x * y; break;
      case ReduceOp::kMin: r = y < x ? y : x; break;
      default: r = y > x ? y : x; break;
    }
    a[i] = H(r);
  }
}

void ReduceBool(ReduceOp op, void* acc, const void* in, size_t n) {
  uint8_t* a = static_cast<uint8_t*>(acc);
  const uint8_t* b = static_cast<const uint8_t*>(in);
  bool is_or = op == ReduceOp::kSum || op == ReduceOp::kMax;
  for (size_t i = 0; i < n; ++i) a[i] = is_or ? (a[i] | b[i]) != 0 : (a[i] & b[i]) != 0;
}

}  // namespace

absl::Status CheckReducible(DType dtype, ReduceOp op) {
  if (dtype == DType::kBool && op == ReduceOp::kAvg) {
    return absl::InvalidArgumentError("op: avg is undefined for bool tensors");
  }
  return absl::OkStatus();
}

void ReduceInto(DType dtype, ReduceOp op, void* acc, const void* in, size_t count) {
  switch (dtype) {
    case DType::kF64: return ReduceTyped<double>(op, acc, in, count);
    case DType::kF32: return ReduceTyped<float>(op, acc, in, count);
    case DType::kI32: return ReduceTyped<int32_t>(op, acc, in, count);
    case DType::kI64: return ReduceTyped<int64_t>(op, acc, in, count);
    case DType::kBF16: return ReduceHalf<BF16>(op, acc, in, count);
    case DType::kF16: return ReduceHalf<F16>(op, acc, in, count);
    case DType::kBool: return ReduceBool(op, acc, in, count);
  }
}

void DivideInPlace(DType dtype, void* buf, size_t count, int divisor) {
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    if constexpr (std::is_same_v<T, bool>) {
      return;
    } else if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>) {
      for (size_t i = 0; i < count; ++i) p[i] = T(static_cast<float>(p[i]) / divisor);
    } else {
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / divisor);
    }
  });
}

}  // namespace loom::collectives
