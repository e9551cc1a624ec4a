// Element conversion between dtypes and exact element access, shared by the
// cast kernel, the references and the integer paths of the tensor ops.
//
// ConvertTo<D>(s) is Loom's one definition of a dtype conversion:
//   floating -> floating   round to nearest even (f64 -> bf16/f16 goes through f32)
//   floating -> i32/i64    truncate toward zero; NaN -> 0; out of range saturates
//   i32/i64  -> i32/i64    two's complement wrap (the low bits are kept)
//   any      -> bool       value != 0 (NaN -> true)
//   bool     -> any        0 or 1
//   i32/i64  -> floating   the nearest representable value
//
// GetInt/SetInt read and write element i (row-major logical order, any strides)
// without going through double, so i64 values beyond 2^53 stay exact:
//
//   int64_t v = GetInt(t, i);        // floating elements convert as above
//   SetInt(out, i, v);               // wraps into i32, 0/1 into bool
//   CopyElement(src, i, dst, j);     // dst[j] = src[i], exact for equal dtypes
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "base/tensor.h"

namespace loom::kernels::cpu {

// i32 or i64 (bool is not counted as an integer dtype).
inline bool IsInteger(DType t) { return t == DType::kI32 || t == DType::kI64; }

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, BF16> || std::is_same_v<T, F16>;

template <typename D, typename S>
D ConvertTo(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (kIsHalf<S>) {
    return ConvertTo<D>(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (kIsHalf<D>) {
    return D(ConvertTo<float>(s));
  } else if constexpr (std::is_floating_point_v<D>) {
    return static_cast<D>(s);
  } else if constexpr (std::is_floating_point_v<S>) {
    // D is i32 or i64. A limit converted to S is exact or rounds outward (to
    // 2^31 or 2^63), so anything at or past it saturates and the rest
    // truncates in range.
    if (s != s) return D(0);
    if (s <= static_cast<S>(std::numeric_limits<D>::min())) return std::numeric_limits<D>::min();
    if (s >= static_cast<S>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    return static_cast<D>(s);
  } else {
    // Integer or bool to a signed integer: modular (two's complement) narrowing.
    return static_cast<D>(static_cast<std::make_unsigned_t<D>>(s));
  }
}

// Element offset (in elements, from raw_data()) of row-major index i of t.
inline int64_t ElementOffsetOf(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int d = t.ndim() - 1; d >= 0; --d) {
    off += (i % t.dim(d)) * t.stride(d);
    i /= t.dim(d);
  }
  return off;
}

inline int64_t GetInt(const Tensor& t, int64_t i) {
  const int64_t off = ElementOffsetOf(t, i);
  return VisitDType(t.dtype(), [&](auto tag) -> int64_t {
    using T = decltype(tag);
    return ConvertTo<int64_t>(static_cast<const T*>(t.raw_data())[off]);
  });
}

inline void SetInt(Tensor& t, int64_t i, int64_t v) {
  const int64_t off = ElementOffsetOf(t, i);
  VisitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    static_cast<T*>(t.raw_data())[off] = ConvertTo<T>(v);
  });
}

// dst[j] = src[i] converted to dst's dtype: through double when both are
// floating, through int64 otherwise (exact for any equal dtypes).
inline void CopyElement(const Tensor& src, int64_t i, Tensor& dst, int64_t j) {
  if (IsFloating(src.dtype()) && IsFloating(dst.dtype())) {
    dst.SetDouble(j, src.GetDouble(i));
  } else if (IsFloating(src.dtype())) {
    const double v = src.GetDouble(i);
    VisitDType(dst.dtype(), [&](auto tag) {
      using T = decltype(tag);
      static_cast<T*>(dst.raw_data())[ElementOffsetOf(dst, j)] = ConvertTo<T>(v);
    });
  } else {
    SetInt(dst, j, GetInt(src, i));
  }
}

}  // namespace loom::kernels::cpu
